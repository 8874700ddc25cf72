"""Everything the composition root needs for tasks, built in one call and used in a few lines.

`build_tasks` assembles store, runner, service, handlers and sweeper on the shared database;
the returned `Tasks` hands app.py the migration, the `TaskStarter`, the extension to advertise,
the handler registration, the scope rules and the lifetime (runner and sweeper) to enter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.lowlevel.server import Server

from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.protocol.errors import TASKS_EXTENSION
from aml_mcp.scope_rules import ScopeRules
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.tasks.access import add_task_scope_rules
from aml_mcp.tasks.audit import LoggingTaskAudit, TaskAudit
from aml_mcp.tasks.clock import Clock, SystemClock
from aml_mcp.tasks.handlers import TaskHandlers
from aml_mcp.tasks.retention import Sweeper
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import TaskService
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.sqlite_store import COMPONENT, MIGRATIONS, SqliteTaskStore
from aml_mcp.tasks.store import TaskStore
from aml_mcp.tasks.streams import FollowableTasks, PublishingTaskStore


@dataclass(frozen=True, slots=True)
class Tasks:
    migration: tuple[str, list[str]]
    handlers: TaskHandlers
    service: TaskService
    runner: TaskRunner
    sweeper: Sweeper
    following: FollowableTasks
    """Which tasks a caller may follow on a listen stream, and their current state."""

    @property
    def extensions(self) -> dict[str, dict[str, Any]]:
        """For `build_server(extensions=...)`: advertised in `server/discover`."""
        return {TASKS_EXTENSION: {}}

    def register(self, server: Server[Any], scope_rules: ScopeRules) -> None:
        """Serve `tasks/get|update|cancel` and tell the scope gate what each needs."""
        self.handlers.register(server)
        add_task_scope_rules(scope_rules, self.service)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Runner and sweeper for the app's lifetime (enter after migrations, while the database is open)."""
        async with anyio.create_task_group() as group, self.runner.running():
            group.start_soon(self.sweeper.run)
            try:
                yield
            finally:
                group.cancel_scope.cancel()


def build_tasks(
    settings: TaskSettings,
    *,
    database: SqliteDatabase,
    tools: ToolRegistry,
    audit: TaskAudit | None = None,
    clock: Clock | None = None,
    bus: EventBus | None = None,
) -> Tasks:
    """With a `bus`, every committed status change is published for listen streams."""
    clock = clock or SystemClock()
    store: TaskStore = SqliteTaskStore(database)
    if bus is not None:
        store = PublishingTaskStore(store, bus, clock, settings.poll_interval_ms)
    runner = TaskRunner(store, tools, settings, clock)
    service = TaskService(store, runner, settings, clock)
    handlers = TaskHandlers(service, audit or LoggingTaskAudit(), settings.poll_interval_ms)
    return Tasks(
        migration=(COMPONENT, MIGRATIONS),
        handlers=handlers,
        service=service,
        runner=runner,
        sweeper=Sweeper(store, clock, settings.sweep_interval_ms),
        following=FollowableTasks(store, clock, settings.poll_interval_ms),
    )
