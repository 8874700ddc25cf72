"""Assembles the Tasks extension for the composition root: `build_tasks(settings, ...) -> Tasks`.

`build_tasks` puts store, runner, service, handlers and sweeper together on the shared database;
the returned `Tasks` is a `Component` (its schema, the `tasks/*` scope rules, runner and sweeper
for the app's lifetime) and also hands app.py the `TaskStarter` for `tools/call`, the extension to
advertise, and what listen streams need to follow tasks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.lowlevel.server import Server
from starlette.routing import BaseRoute

from aml_mcp.audit import AuditRecorder
from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.protocol.capabilities import TASKS_EXTENSION
from aml_mcp.scope_rules import ScopeRule
from aml_mcp.store.sqlite import Migration, SqliteDatabase
from aml_mcp.subscriptions.bus import EventBus
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
    handlers: TaskHandlers
    service: TaskService
    runner: TaskRunner
    sweeper: Sweeper
    following: FollowableTasks
    """Which tasks a caller may follow on a listen stream, and their current state."""
    migrations: Sequence[Migration] = (Migration(COMPONENT, MIGRATIONS),)
    routes: Sequence[BaseRoute] = ()

    @property
    def scope_rules(self) -> Mapping[str, ScopeRule]:
        return self.handlers.scope_rules

    @property
    def extensions(self) -> dict[str, dict[str, Any]]:
        """For `build_server(extensions=...)`: advertised in `server/discover`."""
        return {TASKS_EXTENSION: {}}

    def register(self, server: Server[Any]) -> None:
        """Serve `tasks/get|update|cancel`."""
        self.handlers.register(server)

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
    audit: AuditRecorder,
    bus: EventBus,
    clock: Clock | None = None,
) -> Tasks:
    """Every committed status change is published on `bus` for listen streams."""
    clock = clock or SystemClock()
    store: TaskStore = PublishingTaskStore(SqliteTaskStore(database), bus, clock, settings.poll_interval_ms)
    runner = TaskRunner(store, tools, settings, clock)
    service = TaskService(store, runner, settings, clock)
    return Tasks(
        handlers=TaskHandlers(service, audit, settings.poll_interval_ms),
        service=service,
        runner=runner,
        sweeper=Sweeper(store, clock, settings.sweep_interval_ms),
        following=FollowableTasks(store, clock, settings.poll_interval_ms),
    )
