"""Assembles the Tasks extension for the composition root: `build_tasks(settings, ...) -> Tasks`.

`build_tasks` puts store, runner, service, handlers and sweeper together on the shared database
(the SQLite file, or PostgreSQL when `shared` is given: then several processes share the tasks);
the returned `Tasks` is a `Component` (its schema, the `tasks/*` scope rules, runner and sweeper
for the app's lifetime) and also hands app.py the `TaskStarter` for `tools/call`, the extension to
advertise, and what listen streams need to follow tasks.
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
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.tasks.clock import Clock, SystemClock
from aml_mcp.tasks.db_clock import DatabaseClock
from aml_mcp.tasks.handlers import TaskHandlers
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.retention import Sweeper
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import DeferredExecution, TaskService
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage import StoreObserver, TaskStore, TimedTaskStore
from aml_mcp.tasks.storage import postgres as postgres_tasks
from aml_mcp.tasks.storage.sqlite import MIGRATION, SqliteTaskStore
from aml_mcp.tasks.streams import FollowableTasks, PublishingTaskStore


@dataclass(frozen=True, slots=True)
class Tasks:
    handlers: TaskHandlers
    service: TaskService
    runner: TaskRunner
    sweeper: Sweeper
    following: FollowableTasks
    """Which tasks a caller may follow on a listen stream, and their current state."""
    migrations: Sequence[Migration] = (MIGRATION,)
    """Schemas in the SQLite file (none when the tasks live on PostgreSQL)."""
    shared_migrations: Sequence[Migration] = ()
    """Schemas on PostgreSQL, applied once the shared database is open."""
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
    database: SqliteDatabase,
    tools: ToolRegistry,
    audit: AuditRecorder,
    bus: EventBus | None,
    shared: PostgresDatabase | None = None,
    clock: Clock | None = None,
    run_bodies: bool = True,
    on_claimed: Callable[[TaskRecord, int], None] | None = None,
    observe_store: StoreObserver | None = None,
) -> Tasks:
    """Tasks on `shared` (PostgreSQL) when given, else in `database` (SQLite).

    On SQLite every committed status change is published on `bus` by this process. On PostgreSQL
    the store announces each change itself, inside its transaction (NOTIFY), and a `PgEventBus`
    built on `following.changed` delivers it in every process: `bus` is not used. Time is then the
    database's (`DatabaseClock`) unless `clock` is given. Without `run_bodies` (PostgreSQL only)
    tasks are created unleased and left for worker processes to claim. `observe_store` hears
    the duration of every store operation (for the store latency metric).
    """
    if not run_bodies and shared is None:
        raise ValueError("only tasks on a shared database can be left for workers")
    if shared is not None:
        database_clock = DatabaseClock(shared.now_ms) if clock is None else None
        clock = clock or database_clock
        assert clock is not None
        store: TaskStore = _timed(postgres_tasks.PostgresTaskStore(shared), observe_store)
        return _assemble(
            settings,
            store,
            tools,
            audit,
            clock,
            migrations=(),
            shared_migrations=(postgres_tasks.MIGRATION,),
            database_clock=database_clock,
            run_bodies=run_bodies,
            on_claimed=on_claimed,
        )
    if bus is None:
        raise ValueError("tasks on SQLite publish their changes on an event bus")
    clock = clock or SystemClock()
    store = PublishingTaskStore(
        _timed(SqliteTaskStore(database), observe_store), bus, clock, settings.poll_interval_ms
    )
    return _assemble(settings, store, tools, audit, clock, on_claimed=on_claimed)


def _timed(store: TaskStore, observe: StoreObserver | None) -> TaskStore:
    return store if observe is None else TimedTaskStore(store, observe)


def _assemble(
    settings: TaskSettings,
    store: TaskStore,
    tools: ToolRegistry,
    audit: AuditRecorder,
    clock: Clock,
    run_bodies: bool = True,
    on_claimed: Callable[[TaskRecord, int], None] | None = None,
    **storage: Any,
) -> Tasks:
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
        **storage,
    )
