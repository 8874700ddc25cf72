"""Where this process keeps its state: chosen once, from the settings, and handed to every component.

aml-mcp runs on one machine with its state in the data directory (`LocalPersistence`: SQLite files
and a few small files), or as replicas and workers that share everything through one PostgreSQL
database (`SharedPersistence`). That choice is made here, in `open_persistence`, and nowhere else:
the composition root and the commands ask the object they are given for each store (tasks, notes,
baselines, the audit trail, revocations, the development issuer's state and keys, the shared
secrets), for the event bus that carries task changes to listen streams, and for readiness probes.
Every store's schema is applied by the persistence that made it, with one rule per database (see
`store/migrations.py`): the async stores' in `running()`, before the first request; the blocking
stores' (notes, the development issuer, secrets) when they are opened, because their owners read
them while the app is assembled.

Each method imports the backend it builds only when called: a process on SQLite never imports
the PostgreSQL driver, and a command that needs one store (`aml-mcp revoke`) loads only that one.
A new kind of state adds one method to `Persistence` and one to each implementation
(`docs/extending.md`, "Adding a store").
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from aml_mcp.config import Settings
from aml_mcp.store.migrations import Migration

if TYPE_CHECKING:  # the backends themselves are imported by the methods that use them (see below)
    from aml_mcp.aml.evaluation.storage import Baselines
    from aml_mcp.aml.notes.storage import ForeignIdentifiers, NotesBackend
    from aml_mcp.audit.storage import AuditReader, AuditTable
    from aml_mcp.auth.revocation import RevocationList
    from aml_mcp.auth.storage import RevocationStore
    from aml_mcp.devauth.keys import DevSigningKeys
    from aml_mcp.devauth.storage import DevAuthStore
    from aml_mcp.http.health import ReadinessProbe
    from aml_mcp.shared_secrets.storage import SecretSource
    from aml_mcp.store.postgres import PostgresDatabase
    from aml_mcp.store.sqlite import SqliteDatabase
    from aml_mcp.subscriptions.bus import EventBus, LocalEventBus
    from aml_mcp.subscriptions.followed import FollowedTasks
    from aml_mcp.subscriptions.postgres_bus import PgEventBus
    from aml_mcp.tasks.clock import Clock
    from aml_mcp.tasks.db_clock import DatabaseClock
    from aml_mcp.tasks.runner import TaskRunner
    from aml_mcp.tasks.storage import StoreObserver, TaskStore
    from aml_mcp.tasks.streams import FollowableTasks

SQLITE_FILE = "aml-mcp.db"
"""The data directory's database (tasks, audit trail, revocations, baselines) on one machine."""
NOTES_CONNECTIONS = 2
"""The case notes' blocking pool: a search holds a connection for one statement at a time, and
searches of a bank run one at a time (`aml.search_concurrency_per_tenant`); the first load of the
demo corpus holds one for its whole run, so never fewer than two."""
DEVAUTH_CONNECTIONS = 2
"""The development issuer's blocking pool: sign-ins, token requests and key reads, a few a second."""


@dataclass(frozen=True, slots=True)
class ConnectionBudget:
    """The most connections one process holds on the shared database, by what holds them.

    Every pool is bounded and waits briefly (`store.postgres.PoolBudget`); the blocking pools and
    the audit writer connect when first used and give idle connections back within a minute or
    two, so a process holds what it uses: a worker answers no requests, so it records no decisions
    (no audit connection); the issuer's pool it does use, to publish revoked grants in the
    background. The sum over a deployment must fit the server's `max_connections`.
    """

    pool: int
    """The async pool: tasks, events, revocations, baselines, the database clock."""
    listener: int = 1
    """The event bus's LISTEN connection."""
    audit: int = 1
    """The audit writer's connection (a process that records decisions)."""
    notes: int = NOTES_CONNECTIONS
    devauth: int = DEVAUTH_CONNECTIONS
    """The development issuer's pool (a process that serves it)."""

    @classmethod
    def of(cls, pool_size: int, *, serves_requests: bool) -> ConnectionBudget:
        """An API replica's (`serves_requests`) or a worker's, with `database_pool_size` = `pool_size`."""
        return cls(pool=pool_size, audit=1 if serves_requests else 0)

    @property
    def total(self) -> int:
        return self.pool + self.listener + self.audit + self.notes + self.devauth

    def parts(self) -> str:
        named = (
            ("pool", self.pool),
            ("listener", self.listener),
            ("audit", self.audit),
            ("notes", self.notes),
            ("issuer", self.devauth),
        )
        return " + ".join(f"{name} {count}" for name, count in named if count)


def deployment_budget(replicas: int, workers: int, pool_size: int) -> str:
    """One line for an operator: each kind of process's connections, the deployment's total, and the
    formula (what `aml-mcp cluster` prints as it starts)."""
    replica = ConnectionBudget.of(pool_size, serves_requests=True)
    worker = ConnectionBudget.of(pool_size, serves_requests=False)
    total = replicas * replica.total + workers * worker.total
    return (
        f"connection budget: {total} = {_count(replicas, 'replica')} x {replica.total} ({replica.parts()})"
        f" + {_count(workers, 'worker')} x {worker.total} ({worker.parts()});"
        f" formula R x (P + {replica.total - pool_size}) + W x (P + {worker.total - pool_size}),"
        f" P = database_pool_size = {pool_size}; keep the total below the server's max_connections"
    )


@dataclass(frozen=True, slots=True)
class TaskStorage:
    """The task store as the Tasks extension uses it, and the time its leases are judged on."""

    store: TaskStore
    clock: Clock
    database_clock: DatabaseClock | None
    """The database's clock, to sync and keep in step while the app runs (shared state only)."""


@dataclass(frozen=True, slots=True)
class NotesStorage:
    notes: NotesBackend
    identifiers: ForeignIdentifiers
    """Which identifiers of a draft belong to other banks (never shown, only refused)."""
    start: Callable[[], object]
    """Connects the notes (blocking: the AML component calls it off the event loop as it starts)."""


@dataclass(frozen=True, slots=True)
class DevAuthStorage:
    store: DevAuthStore
    keys: DevSigningKeys


@dataclass(frozen=True, slots=True)
class Hooks:
    """What the shared event bus wakes in this process (`Persistence.connect`)."""

    runner: TaskRunner | None
    """The task runner when this process runs task bodies (not an API-only replica)."""
    revocations: RevocationList
    resync: Sequence[Callable[[], Awaitable[None]]]
    """Called after the bus reconnects: streams re-read the current state of what they follow."""
    counters: Callable[[Callable[[], dict[str, tuple[str, float]]]], None]
    count_tasks: Callable[[Callable[[], Awaitable[dict[str, int]]]], None]


class Persistence(Protocol):
    """Every kind of state this process keeps, from one backend."""

    data_dir: Path

    def probes(self) -> list[tuple[str, ReadinessProbe]]:
        """Readiness probes of the databases, by the reason code `/readyz` reports when one fails."""
        ...

    def secrets(self) -> SecretSource: ...

    def audit_table(self) -> AuditTable: ...

    def audit_reader(self) -> AuditReader: ...

    def revocations(self) -> RevocationStore: ...

    def baselines(self) -> Baselines: ...

    def notes(self) -> NotesStorage:
        """The case notes, not yet opened (the AML component opens them as it starts)."""
        ...

    def devauth(self, *, replay_memory_seconds: float) -> DevAuthStorage:
        """The development issuer's store and keys, open and up to date (it writes while assembled)."""
        ...

    def signing_keys(self) -> contextlib.AbstractContextManager[DevSigningKeys]:
        """Only the issuer's signing keys, for a command (`aml-mcp token`, `devauth rotate-keys`)."""
        ...

    def tasks(
        self, *, poll_interval_ms: int, clock: Clock | None, observe: StoreObserver | None
    ) -> TaskStorage:
        """The task store; `clock` replaces the time leases are judged on (tests)."""
        ...

    def event_bus(self, *, tasks: FollowableTasks, followed: FollowedTasks) -> EventBus:
        """The bus that carries task changes to this process's listen streams."""
        ...

    def connect(self, hooks: Hooks) -> None:
        """Wake `hooks` on what other processes change (a no-op when this process is alone)."""
        ...

    def running(self) -> contextlib.AbstractAsyncContextManager[None]:
        """The databases open, every store's schema applied, the bus running; all closed on exit."""
        ...


class LocalPersistence:
    """One machine: SQLite files and key files in the data directory; task changes published in-process."""

    def __init__(self, data_dir: Path) -> None:
        from aml_mcp.store.sqlite import SqliteDatabase
        from aml_mcp.subscriptions.bus import LocalEventBus

        self.data_dir = data_dir
        self.database: SqliteDatabase = SqliteDatabase(data_dir / SQLITE_FILE)
        self._bus: LocalEventBus = LocalEventBus()
        self._migrations: list[Migration] = []

    def _with(self, migration: Migration) -> None:
        if migration not in self._migrations:
            self._migrations.append(migration)

    def probes(self) -> list[tuple[str, ReadinessProbe]]:
        return [("store_unavailable", self.database.ping)]

    def secrets(self) -> SecretSource:
        from aml_mcp.shared_secrets.storage.files import FilesSecrets

        return FilesSecrets(self.data_dir / "keys")

    def audit_table(self) -> AuditTable:
        from aml_mcp.audit.storage import sqlite

        self._with(sqlite.MIGRATION)
        return sqlite.SqliteAuditTable(self.database)

    def audit_reader(self) -> AuditReader:
        from aml_mcp.audit.storage import sqlite

        self._with(sqlite.MIGRATION)
        return sqlite.SqliteAuditReader(self.database)

    def revocations(self) -> RevocationStore:
        from aml_mcp.auth.storage import sqlite

        self._with(sqlite.MIGRATION)
        return sqlite.SqliteRevocationStore(self.database)

    def baselines(self) -> Baselines:
        from aml_mcp.aml.evaluation.storage import sqlite

        self._with(sqlite.MIGRATION)
        return sqlite.SqliteBaselines(self.database)

    def notes(self) -> NotesStorage:
        from aml_mcp.aml.notes.storage.sqlite import SqliteIdentifierDirectory, SqliteNotes

        notes = SqliteNotes.open(self.data_dir)  # its own file, with its schema
        return NotesStorage(notes, SqliteIdentifierDirectory(notes.path), start=_nothing)

    def devauth(self, *, replay_memory_seconds: float) -> DevAuthStorage:
        from aml_mcp.devauth.keys import DevSigningKeys
        from aml_mcp.devauth.storage.sqlite import SqliteDevAuthStore

        store = SqliteDevAuthStore(self.data_dir / "devauth.db", replay_memory_seconds=replay_memory_seconds)
        return DevAuthStorage(store, DevSigningKeys.in_data_dir(self.data_dir))

    @contextlib.contextmanager
    def signing_keys(self) -> Iterator[DevSigningKeys]:
        from aml_mcp.devauth.keys import DevSigningKeys

        yield DevSigningKeys.in_data_dir(self.data_dir)

    def tasks(
        self, *, poll_interval_ms: int, clock: Clock | None, observe: StoreObserver | None
    ) -> TaskStorage:
        from aml_mcp.tasks.clock import SystemClock
        from aml_mcp.tasks.storage import sqlite
        from aml_mcp.tasks.streams import PublishingTaskStore

        self._with(sqlite.MIGRATION)
        time = clock or SystemClock()
        # One process: it announces every committed status change itself, on its own bus.
        store = _timed(sqlite.SqliteTaskStore(self.database), observe)
        return TaskStorage(PublishingTaskStore(store, self._bus, time, poll_interval_ms), time, None)

    def event_bus(self, *, tasks: FollowableTasks, followed: FollowedTasks) -> EventBus:
        return self._bus

    def connect(self, hooks: Hooks) -> None:
        return None  # nothing happens elsewhere: every change is this process's own

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        self.database.open()
        try:
            for migration in self._migrations:
                await self.database.apply(migration)
            yield
        finally:
            self.database.close()


class SharedPersistence:
    """Replicas and workers: every kind of state in one PostgreSQL database (optionally one schema),
    task changes announced by the database (NOTIFY) and delivered to every process's streams."""

    def __init__(self, data_dir: Path, url: str, *, schema: str | None = None, pool_size: int = 4) -> None:
        from aml_mcp.store.postgres import PoolBudget, PostgresDatabase

        self.data_dir = data_dir
        self.database: PostgresDatabase = PostgresDatabase(
            url, schema=schema, budget=PoolBudget(max_size=pool_size)
        )
        self._migrations: list[Migration] = []
        self._bus: PgEventBus | None = None

    def _with(self, migration: Migration) -> None:
        if migration not in self._migrations:
            self._migrations.append(migration)

    def probes(self) -> list[tuple[str, ReadinessProbe]]:
        return [("shared_store_unavailable", self.database.ping)]

    def secrets(self) -> SecretSource:
        from aml_mcp.shared_secrets.storage.postgres import PostgresSecrets

        # Replicas share their secrets, so what one seals another opens.
        return PostgresSecrets(self.database)

    def audit_table(self) -> AuditTable:
        from aml_mcp.audit.storage import postgres

        self._with(postgres.MIGRATION)
        return postgres.PostgresAuditTable(self.database.url, schema=self.database.schema)

    def audit_reader(self) -> AuditReader:
        from aml_mcp.audit.storage import postgres

        self._with(postgres.MIGRATION)
        return postgres.PostgresAuditReader(self.database)

    def revocations(self) -> RevocationStore:
        from aml_mcp.auth.storage import postgres

        self._with(postgres.MIGRATION)
        return postgres.PostgresRevocationStore(self.database)

    def baselines(self) -> Baselines:
        from aml_mcp.aml.evaluation.storage import postgres

        self._with(postgres.MIGRATION)
        return postgres.PostgresBaselines(self.database)

    def notes(self) -> NotesStorage:
        from aml_mcp.aml.notes.storage.postgres import PostgresIdentifierDirectory, PostgresNotes

        notes = PostgresNotes(self.database, max_connections=NOTES_CONNECTIONS)
        # Connected (and its schema applied) as the app starts, off the event loop.
        return NotesStorage(notes, PostgresIdentifierDirectory(notes), start=notes.open)

    def devauth(self, *, replay_memory_seconds: float) -> DevAuthStorage:
        from aml_mcp.devauth.keys import DevSigningKeys
        from aml_mcp.devauth.storage import postgres

        # Unreachable: the start fails here.
        database = postgres.open_database(self.database, max_size=DEVAUTH_CONNECTIONS)
        return DevAuthStorage(
            postgres.PostgresDevAuthStore(database, replay_memory_seconds=replay_memory_seconds),
            DevSigningKeys(postgres.PostgresKeyStorage(database)),
        )

    @contextlib.contextmanager
    def signing_keys(self) -> Iterator[DevSigningKeys]:
        from aml_mcp.devauth.keys import DevSigningKeys
        from aml_mcp.devauth.storage import postgres

        database = postgres.open_database(self.database, max_size=1)
        try:
            yield DevSigningKeys(postgres.PostgresKeyStorage(database))
        finally:
            database.close()

    def tasks(
        self, *, poll_interval_ms: int, clock: Clock | None, observe: StoreObserver | None
    ) -> TaskStorage:
        from aml_mcp.tasks.db_clock import DatabaseClock
        from aml_mcp.tasks.storage import postgres

        self._with(postgres.MIGRATION)
        # Leases are judged on the one clock every process agrees on: the database's.
        database_clock = DatabaseClock(self.database.now_ms) if clock is None else None
        time = clock or database_clock
        assert time is not None
        return TaskStorage(_timed(postgres.PostgresTaskStore(self.database), observe), time, database_clock)

    def event_bus(self, *, tasks: FollowableTasks, followed: FollowedTasks) -> EventBus:
        from aml_mcp.subscriptions.postgres_bus import PgEventBus

        # Task changes committed by any process reach this process's streams through the database;
        # a changed task is re-read (by id and owner) before it reaches a stream.
        self._bus = PgEventBus(self.database, resolve=tasks.changed, followed=followed)
        return self._bus

    def connect(self, hooks: Hooks) -> None:
        from aml_mcp.auth.storage import postgres as revocations
        from aml_mcp.tasks.storage import postgres as tasks

        bus = self._bus
        if bus is None:
            raise RuntimeError("connect() needs the bus: call event_bus() first")
        runner = hooks.runner
        if runner is not None:
            # Tasks an API-only replica created wake this runner at once; a resync (a reconnect,
            # when signals may have been missed) claims and re-reads its leases too.
            bus.on_signal(tasks.CREATED_CHANNEL, lambda _: runner.wake())
            # Cancellations and answers for a task this runner holds, stored by any process.
            bus.on_signal(tasks.CONTROL_CHANNEL, runner.control_signal)
            bus.on_resync(_waking(runner.wake, runner.heartbeat_now))
        # A revocation committed by any process is re-read here at once, and after every reconnect
        # (notifications sent while the listener was away are lost; the periodic poll stays the bound).
        bus.on_notify(self.database.channel(revocations.CHANNEL), hooks.revocations.refresh)
        bus.on_resync(hooks.revocations.refresh)
        for resync in hooks.resync:
            bus.on_resync(resync)
        database = self.database
        hooks.count_tasks(lambda: tasks.count_by_status(database))
        hooks.counters(
            lambda: {
                "aml_mcp_bus_reconnects": ("Event bus listener reconnects", max(0, bus.connects - 1)),
                "aml_mcp_bus_resyncs": ("Event bus resyncs (streams re-read current state)", bus.resyncs),
                "aml_mcp_bus_notifications": ("Task notifications received", bus.received),
            }
        )

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        await self.database.open()
        try:
            for migration in self._migrations:
                await self.database.apply(migration)
            if self._bus is None:
                yield
            else:
                async with self._bus.running():
                    yield
        finally:
            await self.database.close()


def open_persistence(settings: Settings) -> Persistence:
    """The one place the backend is chosen: PostgreSQL when `database_url` is set, else the data
    directory. Nothing is opened yet."""
    data_dir = settings.ensure_data_dir()
    if settings.database_url is None:
        return LocalPersistence(data_dir)
    return SharedPersistence(
        data_dir,
        settings.database_url,
        schema=settings.database_schema,
        pool_size=settings.database_pool_size,
    )


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _timed(store: TaskStore, observe: StoreObserver | None) -> TaskStore:
    from aml_mcp.tasks.storage import TimedTaskStore

    return store if observe is None else TimedTaskStore(store, observe)


def _nothing() -> None:
    return None


def _waking(*wakes: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def hook() -> None:
        for wake in wakes:
            wake()

    return hook


__all__ = [
    "ConnectionBudget",
    "DevAuthStorage",
    "Hooks",
    "LocalPersistence",
    "NotesStorage",
    "Persistence",
    "SharedPersistence",
    "TaskStorage",
    "deployment_budget",
    "open_persistence",
]
