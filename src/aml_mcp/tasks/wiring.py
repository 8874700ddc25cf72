"""Assembles the Tasks extension for the composition root: `build_tasks(settings, ...) -> Tasks`.

`build_tasks` puts runner, service, handlers and sweeper together on the task store the
persistence object hands it (SQLite in the data directory, or PostgreSQL shared by every process);
the returned `Tasks` is a `Component` (the `tasks/*` scope rules, runner and sweeper for the app's
lifetime) and also hands app.py the `TaskStarter` for `tools/call`, the extension to advertise, and
what listen streams need to follow tasks.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.lowlevel.server import Server
from starlette.routing import BaseRoute

from aml_mcp.audit import AuditRecorder
from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.protocol.capabilities import TASKS_EXTENSION
from aml_mcp.scope_rules import ScopeRule
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.db_clock import DatabaseClock
from aml_mcp.tasks.handlers import TaskHandlers
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.retention import Sweeper
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import DeferredExecution, TaskService
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage import TaskStore
from aml_mcp.tasks.streams import FollowableTasks


@dataclass(frozen=True, slots=True)
class Tasks:
    handlers: TaskHandlers
    service: TaskService
    runner: TaskRunner
    sweeper: Sweeper
    following: FollowableTasks
    """Which tasks a caller may follow on a listen stream, and their current state."""
    runs_bodies: bool = True
    """False for an API-only process: the runner never starts, workers run the bodies."""
    database_clock: DatabaseClock | None = None
    """On PostgreSQL: the clock every process reads, synced before the runner starts."""
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
        if self.database_clock is not None:
            await self.database_clock.sync()
        runner = self.runner.running() if self.runs_bodies else contextlib.nullcontext()
        async with anyio.create_task_group() as group, runner:
            group.start_soon(self.sweeper.run)
            if self.database_clock is not None:
                group.start_soon(self.database_clock.run)
            try:
                yield
            finally:
                group.cancel_scope.cancel()


def build_tasks(
    settings: TaskSettings,
    *,
    store: TaskStore,
    clock: Clock,
    database_clock: DatabaseClock | None = None,
    tools: ToolRegistry,
    audit: AuditRecorder,
    run_bodies: bool = True,
    on_claimed: Callable[[TaskRecord, int], None] | None = None,
) -> Tasks:
    """The Tasks extension on `store` (from the persistence object), its leases judged on `clock`.

    `database_clock`, when the time is the shared database's, is synced before the runner starts and
    kept in step meanwhile. Without `run_bodies` (an API-only replica) tasks are created unleased
    and left for worker processes to claim.
    """
    runner = TaskRunner(store, tools, settings, clock, on_claimed=on_claimed)
    service = TaskService(store, runner if run_bodies else DeferredExecution(), settings, clock)
    return Tasks(
        handlers=TaskHandlers(service, audit, settings.poll_interval_ms),
        service=service,
        runner=runner,
        sweeper=Sweeper(
            store, clock, settings.sweep_interval_ms, keep_created_within_ms=settings.create_window_ms
        ),
        following=FollowableTasks(store, clock, settings.poll_interval_ms),
        runs_bodies=run_bodies,
        database_clock=database_clock,
    )
