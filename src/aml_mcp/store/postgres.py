"""PostgreSQL for several processes sharing one state: an async connection pool and migrations.

SQLite serves one process; as soon as replicas and workers share tasks, the database has to be a
server. This module is the PostgreSQL counterpart of `store/sqlite.py` and keeps its shape:
components bring a `Migration` (an append-only list of SQL scripts), `apply` runs the steps not
yet recorded in `schema_migrations`, each step in its own transaction. Two processes starting at
once never both apply a step: the migration transaction takes a transaction-scoped advisory lock
first.

Durability: with the default `synchronous_commit = on`, a `COMMIT` returns after the WAL is flushed
on the primary, so a write acknowledged here survives a crash (the Tasks extension forbids
answering `CreateTaskResult` before that). Deployments with a standby set
`synchronous_standby_names`; reads always go to the primary this URL names.

Time: `now_ms()` is the database's `clock_timestamp()`, the one clock every process agrees on
(see `tasks/db_clock.py` for how task leases use it).

`schema` gives every connection `search_path = <schema>`, so one server can hold isolated copies
(tests run each in its own schema); the schema is created when missing.

The connection budget is explicit (`PoolBudget`): every process holds at most `max_size` pooled
connections plus its listener (`PgEventBus`) and the blocking stores' few (`SyncPostgres`), the sum
over all replicas and workers must stay below the server's `max_connections`, and a caller waits at
most `wait_seconds` for a connection (see `aml_mcp.persistence.ConnectionBudget`).
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from aml_mcp.store.locks import AdvisoryLock
from aml_mcp.store.migrations import Migration

logger = logging.getLogger(__name__)


LOCK_MIGRATIONS = "SELECT pg_advisory_xact_lock(%s)"
CREATE_MIGRATIONS_TABLE = (
    "CREATE TABLE IF NOT EXISTS schema_migrations ("
    " component TEXT NOT NULL, version INTEGER NOT NULL,"
    " applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),"
    " PRIMARY KEY (component, version))"
)
SCHEMA_VERSION = "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = %s"
RECORD_STEP = "INSERT INTO schema_migrations (component, version) VALUES (%s, %s)"
"""The one migration rule's statements, shared by the async (`PostgresDatabase.migrate`) and the
blocking (`SyncPostgres.apply`) handle: each step in its own transaction, under the migration lock,
recorded by component and version."""

_SCHEMA_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,39}$")
"""A schema name short enough that a channel named after it stays under PostgreSQL's 63 bytes."""


def is_postgres_url(url: str | None) -> bool:
    """Whether `url` names a PostgreSQL server (`postgresql://` or `postgres://`)."""
    return url is not None and url.split("://", 1)[0] in ("postgresql", "postgres")


def redacted(url: str) -> str:
    """`url` without its password, fit for logs and error messages."""
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable database URL>"
    params.pop("password", None)
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


@dataclass(frozen=True, slots=True)
class PoolBudget:
    """One pool's share of the server's connections, and how long a caller waits for one of them.

    Small by default: every replica and worker holds a pool, and the sum over all of them (with
    each process's listener, audit, notes and development-issuer connections: `docs/scale-out.md`,
    "Connection budget") has to fit the server's `max_connections` beside everyone else's. Statements
    take milliseconds, so a few connections serve many requests; what a pool of four cannot absorb
    is load the database cannot either. The wait is short for the same reason: when every connection
    is taken (slow queries, a database in trouble), a request fails at once with a retryable storage
    error (the HTTP layer's 503 with `Retry-After`) instead of queueing until the client gives up.
    """

    min_size: int = 1
    max_size: int = 4
    connect_timeout_seconds: float = 5.0
    """How long a new connection may take before the attempt counts as failed."""
    wait_seconds: float = 1.0
    """How long an operation waits for a free pooled connection before the store is unavailable."""
    idle_seconds: float = 60.0
    """A connection above `min_size` left unused this long is closed: a burst's connections go back
    to the server within a minute instead of being held at the pool's maximum for good."""
    reconnect_seconds: float = 3.0
    """How long one background reconnection keeps retrying (its waits doubling from 1 s) before it
    gives up and the next request starts a fresh one. The pool's own default, five minutes, let the
    wait grow to 16 s during a 20 s database restart, so a replica came back ten seconds after the
    database did; with a short attempt the next request after the restart reconnects at once."""


def storage_fault(exc: BaseException) -> str | None:
    """A short cause when `exc` is the database being unreachable or out of resources, else `None`.

    Connection loss, the server shutting down, too many connections, a full disk, a read-only
    standby and an exhausted pool are the storage's condition; a syntax error or a constraint
    violation is a bug and stays what it is.
    """
    if isinstance(exc, PoolTimeout):
        return "no database connection free"
    if isinstance(exc, psycopg.OperationalError):
        sqlstate = getattr(exc, "sqlstate", None) or ""
        if sqlstate.startswith("53"):
            return "database out of resources"
        if sqlstate == "57014":
            return "database statement timed out"
        return "database unreachable"
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return "database read-only"
    if isinstance(exc, psycopg.errors.DiskFull):
        return "disk full"
    if isinstance(exc, psycopg.InterfaceError):
        return "database connection closed"
    if isinstance(exc, RuntimeError) and "not open" in str(exc):
        return "database closed"  # used while the server shuts down
    return None


STATEMENT_SECONDS = 15.0
"""The longest a statement on the pool may take (its wait for a connection aside): the bound of the
shield that lets it finish when its caller is cancelled (`PostgresDatabase._shielded`). Statements
here take milliseconds; one still running after this fails as a storage fault ("statement timed
out")."""


def _returns_rows(cursor: psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned rows (which `fetchall` needs). Read from the result's status,
    not `cursor.description`, which builds a `Column` object per column on every call: a task row
    has 26, and that was a tenth of a millisecond of every statement."""
    result = cursor.pgresult
    return result is not None and result.status == pq.ExecStatus.TUPLES_OK


def _overran(seconds: float) -> psycopg.errors.QueryCanceled:
    return psycopg.errors.QueryCanceled(f"the statement did not finish within {seconds:g} s")


class PostgresDatabase:
    """A pool of connections to one PostgreSQL database (optionally one schema of it)."""

    def __init__(self, url: str, *, schema: str | None = None, budget: PoolBudget | None = None) -> None:
        if not is_postgres_url(url):
            raise ValueError("a PostgreSQL URL starts with postgresql://")
        if schema is not None and not _SCHEMA_NAME.match(schema):
            raise ValueError("schema must be a lower-case SQL identifier")
        self.url = url
        self.schema = schema
        self.budget = budget or PoolBudget()
        self._pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] | None = None

    def connect_kwargs(self) -> dict[str, Any]:
        """Options every connection of this database gets (the listener's too)."""
        options: dict[str, Any] = {
            "connect_timeout": max(1, round(self.budget.connect_timeout_seconds)),
            "application_name": "aml-mcp",
            # Keepalives notice a dead server or a cut network within about 20 s, not hours.
            "keepalives": 1,
            "keepalives_idle": 10,
            "keepalives_interval": 5,
            "keepalives_count": 2,
        }
        if self.schema is not None:
            options["options"] = f"-c search_path={self.schema}"
        return options

    async def open(self) -> None:
        """Create the schema if asked for one, then open the pool (waits for `min_size` connections)."""
        if self._pool is not None:
            return
        if self.schema is not None:
            async with await psycopg.AsyncConnection.connect(
                self.url, autocommit=True, connect_timeout=self.connect_kwargs()["connect_timeout"]
            ) as conn:
                # `IF NOT EXISTS` is not atomic: a process starting at the same moment may create it
                # between the check and the insert (a unique violation), which is just as good.
                with contextlib.suppress(psycopg.errors.UniqueViolation):
                    await conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema))
                    )
        pool: AsyncConnectionPool[psycopg.AsyncConnection[Any]] = AsyncConnectionPool(
            self.url,
            min_size=self.budget.min_size,
            max_size=self.budget.max_size,
            # Autocommit: a single statement is its own transaction, one round trip instead of the
            # three of BEGIN, statement, COMMIT; `transaction()` opens an explicit one when needed.
            kwargs={**self.connect_kwargs(), "autocommit": True},
            timeout=self.budget.wait_seconds,
            max_idle=self.budget.idle_seconds,
            reconnect_timeout=self.budget.reconnect_seconds,
            name="aml-mcp",
            open=False,
        )
        try:
            await pool.open(wait=True, timeout=self.budget.connect_timeout_seconds + 5)
        except PoolTimeout as exc:
            await pool.close()
            raise psycopg.OperationalError(f"cannot connect to {redacted(self.url)}") from exc
        self._pool = pool

    def channel(self, name: str) -> str:
        """The NOTIFY channel `name` of this deployment. Channels are database-wide, not per schema,
        so deployments in different schemas of one database get channels of their own."""
        return name if self.schema is None else f"{name}__{self.schema}"

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    @property
    def pool(self) -> AsyncConnectionPool[psycopg.AsyncConnection[Any]]:
        if self._pool is None:
            raise RuntimeError("database is not open")
        return self._pool

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction: committed on exit, rolled back on error.

        Finished even if the caller is cancelled meanwhile (`_shielded`): keep the body to a few
        statements."""
        with self._shielded() as shield:
            async with self.pool.connection() as conn, conn.transaction():
                yield conn
        if shield.cancelled_caught:
            raise _overran(self._shield_seconds)
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller stops here, not later

    async def execute(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """One statement, atomic on its own (autocommit), in one round trip; the rows it returns.
        Finished even if the caller is cancelled meanwhile (`_shielded`)."""
        rows: list[tuple[Any, ...]] = []
        with self._shielded() as shield:
            async with self.pool.connection() as conn:
                cursor = await conn.execute(query, params)
                rows = await cursor.fetchall() if _returns_rows(cursor) else []
        if shield.cancelled_caught:
            raise _overran(self._shield_seconds)
        await anyio.lowlevel.checkpoint_if_cancelled()  # a cancelled caller stops here, not later
        return rows

    async def execute_together(self, statements: Sequence[tuple[str, Any]]) -> list[list[tuple[Any, ...]]]:
        """Several statements as one transaction sent in one round trip (pipeline mode): all of them
        commit or none does; each statement's rows, in order. Finished even if the caller is
        cancelled meanwhile (`_shielded`).

        One commit where there would be one per statement: one WAL flush, and for statements that
        NOTIFY one turn at the lock through which PostgreSQL serializes every NOTIFYing commit of
        the server. Statements that update several rows each must lock them in one order (the
        callers' concern), or two such transactions can deadlock."""
        results: list[list[tuple[Any, ...]]] = []
        with self._shielded() as shield:
            async with self.pool.connection() as conn:
                # No `conn.transaction()`: in a pipeline it syncs after BEGIN, before and after the
                # statements — three round trips. Statements up to a pipeline's one Sync are one
                # implicit transaction (the connection is in autocommit): committed at the Sync if
                # all succeeded, else rolled back, the statements after the failed one skipped.
                try:
                    async with conn.pipeline():
                        cursors = [await conn.execute(query, params) for query, params in statements]
                except Exception:
                    # psycopg may take a statement the server skipped for being after the failed
                    # one as prepared on this connection (its `transaction()` would forget them
                    # all on rollback): closed, the pool replaces it with a clean one.
                    await conn.close()
                    raise
                for cursor in cursors:
                    results.append(await cursor.fetchall() if _returns_rows(cursor) else [])
        if shield.cancelled_caught:
            raise _overran(self._shield_seconds)
        await anyio.lowlevel.checkpoint_if_cancelled()
        return results

    @property
    def _shield_seconds(self) -> float:
        return self.budget.wait_seconds + STATEMENT_SECONDS

    def _shielded(self) -> anyio.CancelScope:
        """A scope the caller's cancellation does not reach, bounded by `_shield_seconds`.

        A request is cancelled when its client hangs up (the SDK cancels a streamed request's
        handler on disconnect). Cancelled mid-statement, psycopg tries to cancel the query on the
        server, anyio cancels that attempt too, and psycopg closes the connection: the pool loses
        it and opens another (a connection and a cancel connection per hang-up). Shielded, the
        statement finishes in its milliseconds, the connection goes back to the pool, and the
        cancellation takes effect at the caller's next checkpoint. The bound keeps a statement
        that hangs from holding the caller for ever (it then fails as a storage fault)."""
        return anyio.CancelScope(shield=True, deadline=anyio.current_time() + self._shield_seconds)

    async def now_ms(self) -> int:
        """The database's clock (`clock_timestamp()`), in epoch milliseconds."""
        async with self.pool.connection() as conn:
            cursor = await conn.execute("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])

    async def apply(self, migration: Migration) -> int:
        """`migrate` for a component's `Migration`."""
        return await self.migrate(migration.component, migration.steps)

    async def migrate(self, component: str, steps: Sequence[str]) -> int:
        """Bring `component`'s tables up to date; returns its schema version.

        Same contract as `SqliteDatabase.migrate`: step N runs once, in its own transaction, and is
        recorded; components never share a numbering.
        """
        # Not `transaction()`: a step may take longer than a statement's bound (an index on a big
        # table), and nothing cancels a migration but the process stopping.
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(LOCK_MIGRATIONS, (AdvisoryLock.MIGRATION,))
            await conn.execute(CREATE_MIGRATIONS_TABLE)
        current = 0
        for _ in range(len(steps) + 1):
            async with self.pool.connection() as conn, conn.transaction():
                await conn.execute(LOCK_MIGRATIONS, (AdvisoryLock.MIGRATION,))
                cursor = await conn.execute(SCHEMA_VERSION, (component,))
                row = await cursor.fetchone()
                current = int(row[0]) if row is not None else 0
                if current >= len(steps):
                    return current
                await conn.execute(steps[current].encode())
                await conn.execute(RECORD_STEP, (component, current + 1))
        return current

    async def ping(self) -> None:
        """Readiness probe: the server answers a query."""
        async with self.pool.connection() as conn:
            await conn.execute("SELECT 1")
