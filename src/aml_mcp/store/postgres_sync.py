"""Synchronous connections to the shared PostgreSQL database, for stores called from threads.

Some stores are driven from worker threads rather than the event loop (case notes during search,
the development issuer's authlib callbacks, the audit flusher, the shared secrets read while the
app is built), so they need a blocking pool beside `PostgresDatabase`'s async one. This is that
pool, written once: the same connection options and schema, a fail-fast `open`, and `apply` with
the one migration rule every store follows (see `PostgresDatabase.migrate`): each step in its own
transaction under the migration lock, recorded in `schema_migrations`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import ConnectionPool, PoolTimeout

from aml_mcp.store.locks import AdvisoryLock
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import (
    CREATE_MIGRATIONS_TABLE,
    LOCK_MIGRATIONS,
    RECORD_STEP,
    SCHEMA_VERSION,
    PostgresDatabase,
    redacted,
)

DEFAULT_MAX_SIZE = 4
"""Connections a synchronous store holds at most (counted in the budget of `docs/scale-out.md`)."""


class SyncPostgres:
    """A blocking pool on `database`'s server and schema, named `name` (its `application_name`)."""

    def __init__(self, database: PostgresDatabase, *, name: str, max_size: int = DEFAULT_MAX_SIZE) -> None:
        self.database = database
        self.name = name
        self._pool: ConnectionPool[psycopg.Connection[Any]] = ConnectionPool(
            database.url,
            min_size=0,  # opened when first used, closed after `idle_seconds` unused
            max_size=max(1, max_size),
            max_idle=database.budget.idle_seconds,
            reconnect_timeout=database.budget.reconnect_seconds,
            kwargs={**database.connect_kwargs(), "autocommit": True, "application_name": name},
            timeout=database.budget.wait_seconds,
            name=name,
            open=False,
        )
        self._open = False

    def open(self) -> SyncPostgres:
        """Connect, creating the schema if asked for one. An unreachable server fails at once, with
        libpq's reason, rather than after the pool's retries."""
        if self._open:
            return self
        kwargs = self.database.connect_kwargs()
        with psycopg.connect(self.database.url, autocommit=True, **kwargs) as conn:
            if self.database.schema is not None:
                # Not atomic: a process starting at the same moment may create it first, as good.
                with contextlib.suppress(psycopg.errors.UniqueViolation):
                    conn.execute(
                        sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.database.schema))
                    )
        try:
            self._pool.open(wait=True, timeout=self.database.budget.connect_timeout_seconds + 5)
        except PoolTimeout as exc:
            self._pool.close()
            raise psycopg.OperationalError(f"cannot connect to {redacted(self.database.url)}") from exc
        self._open = True
        return self

    def close(self) -> None:
        self._open = False
        self._pool.close()

    def __enter__(self) -> SyncPostgres:
        return self.open()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection in autocommit: each statement is its own transaction."""
        with self._pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction: committed on exit, rolled back on error."""
        with self._pool.connection() as conn, conn.transaction():
            yield conn

    def apply(self, migration: Migration) -> int:
        """Bring `migration.component`'s tables up to date; its schema version. The same contract as
        `PostgresDatabase.migrate`: each step once, in its own transaction, recorded."""
        with self.transaction() as conn:
            conn.execute(LOCK_MIGRATIONS, (AdvisoryLock.MIGRATION,))
            conn.execute(CREATE_MIGRATIONS_TABLE)
        current = 0
        for _ in range(len(migration.steps) + 1):
            with self.transaction() as conn:
                conn.execute(LOCK_MIGRATIONS, (AdvisoryLock.MIGRATION,))
                row = conn.execute(SCHEMA_VERSION, (migration.component,)).fetchone()
                current = int(row[0]) if row is not None else 0
                if current >= len(migration.steps):
                    return current
                conn.execute(migration.steps[current].encode())
                conn.execute(RECORD_STEP, (migration.component, current + 1))
        return current


__all__ = ["DEFAULT_MAX_SIZE", "SyncPostgres"]
