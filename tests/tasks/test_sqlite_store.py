"""What only the SQLite task store has; every `TaskStore` behaviour is in tests/contract/."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = SqliteDatabase(tmp_path / "tasks.db")
    database.open()
    await database.migrate(COMPONENT, MIGRATIONS)
    yield database
    database.close()


@pytest.fixture
def store(db: SqliteDatabase) -> SqliteTaskStore:
    return SqliteTaskStore(db)


async def test_migration_is_versioned_and_idempotent(db: SqliteDatabase) -> None:
    assert await db.migrate(COMPONENT, MIGRATIONS) == len(MIGRATIONS)
    rows = await db.read(
        lambda c: c.execute("SELECT version FROM schema_migrations WHERE component = 'tasks'").fetchall()
    )
    assert [row[0] for row in rows] == list(range(1, len(MIGRATIONS) + 1))


async def test_unknown_foreign_and_expired_lookups_run_the_same_single_query(
    db: SqliteDatabase, store: SqliteTaskStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No timing tell: one indexed statement, same text, whatever the reason the task is not found."""
    mine = owner()
    live = record(mine, now=NOW)
    expiring = record(mine, now=NOW, ttl_ms=10)
    await store.create(live)
    await store.create(expiring)
    statements: list[str] = []
    original = db.read_now

    def traced(operation: Callable[[sqlite3.Connection], Any]) -> Any:
        def run(conn: sqlite3.Connection) -> Any:
            conn.set_trace_callback(statements.append)
            try:
                return operation(conn)
            finally:
                conn.set_trace_callback(None)

        return original(run)

    monkeypatch.setattr(db, "read_now", traced)
    traces = []
    for task_id, who in (
        ("no-such-task", mine),
        (live.task_id, owner(subject="mallory")),
        (expiring.task_id, mine),
    ):
        statements.clear()
        assert await store.find(task_id, who, NOW + 100) is None
        traces.append([s.split(" WHERE ")[0] + " WHERE …" for s in statements])
    assert all(len(trace) == 1 for trace in traces)
    assert traces[0] == traces[1] == traces[2]


async def test_the_store_file_is_in_wal_mode(store: SqliteTaskStore, tmp_path: Path) -> None:
    await store.create(record(owner(), now=NOW))
    conn = sqlite3.connect(tmp_path / "tasks.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
