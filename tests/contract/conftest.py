"""The `backend` fixture: every contract test runs on SQLite and on PostgreSQL.

Each backend yields a `Backend`: its task store, and a way to run a raw statement on it (the
triggers' tests write SQL by hand, past the store). PostgreSQL tests each get their own schema.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from aml_mcp.store.migrations import Migration
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.storage import TaskStore
from aml_mcp.tasks.storage import postgres as postgres_tasks
from aml_mcp.tasks.storage import sqlite as sqlite_tasks
from aml_mcp.tasks.storage.postgres import PostgresTaskStore
from aml_mcp.tasks.storage.sqlite import SqliteTaskStore
from tests.support.postgres import scratch_database


@dataclass(frozen=True)
class Backend:
    name: str
    store: TaskStore
    execute: Callable[[str, tuple[Any, ...]], Awaitable[None]]
    """Run one statement as written (`?` placeholders), in its own transaction, past the store."""
    integrity_error: type[Exception]
    """What the database raises when a trigger refuses a statement."""
    count: Callable[[], Awaitable[int]]
    """How many task rows exist, read on a fresh connection."""


@pytest.fixture(params=["sqlite", "postgres"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "tasks.db")
        db.open()
        await db.apply(Migration(sqlite_tasks.COMPONENT, sqlite_tasks.MIGRATIONS))

        async def execute(statement: str, args: tuple[Any, ...]) -> None:
            await db.write(lambda conn: conn.execute(statement, args))

        async def count() -> int:
            conn = sqlite3.connect(tmp_path / "tasks.db")
            try:
                return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
            finally:
                conn.close()

        try:
            yield Backend("sqlite", SqliteTaskStore(db), execute, sqlite3.IntegrityError, count)
        finally:
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_tasks.MIGRATION)

        async def pg_execute(statement: str, args: tuple[Any, ...]) -> None:
            async with pg.transaction() as conn:
                await conn.execute(statement.replace("?", "%s"), args)

        async def pg_count() -> int:
            async with await psycopg.AsyncConnection.connect(pg.url, **pg.connect_kwargs()) as conn:
                row = await (await conn.execute("SELECT COUNT(*) FROM tasks")).fetchone()
            assert row is not None
            return int(row[0])

        yield Backend(
            "postgres",
            PostgresTaskStore(pg),
            pg_execute,
            psycopg.errors.IntegrityConstraintViolation,
            pg_count,
        )
