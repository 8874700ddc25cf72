"""The SQLite quota counts use their owner indexes (the behaviour itself is in tests/contract/)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.storage import TaskQuota
from aml_mcp.tasks.storage.sqlite import _RECENT_CREATES, COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = SqliteDatabase(tmp_path / "tasks.db")
    database.open()
    await database.migrate(COMPONENT, MIGRATIONS)
    try:
        yield database
    finally:
        database.close()


@pytest.fixture
def store(db: SqliteDatabase) -> SqliteTaskStore:
    return SqliteTaskStore(db)


async def test_the_quota_count_uses_the_owner_index(db: SqliteDatabase, store: SqliteTaskStore) -> None:
    await store.create(
        record(owner("alice"), now=NOW), TaskQuota(active_per_principal=2, active_per_tenant=3)
    )

    def plan(conn: object) -> str:
        sql = (
            "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM tasks WHERE owner_tenant = 'a' AND owner_issuer = 'b'"
            " AND status IN ('working', 'input_required') AND expires_at > 0"
        )
        return json.dumps(conn.execute(sql).fetchall())  # type: ignore[attr-defined]

    assert "tasks_active_by_owner" in await db.read(plan)


async def test_the_create_window_count_uses_the_principal_index(
    db: SqliteDatabase, store: SqliteTaskStore
) -> None:
    quota = TaskQuota(active_per_principal=2, active_per_tenant=3, created_per_principal=5, window_ms=60_000)
    await store.create(record(owner("alice"), now=NOW), quota)

    def plan(conn: object) -> str:
        sql = "EXPLAIN QUERY PLAN " + _RECENT_CREATES
        return json.dumps(conn.execute(sql, ("a", "b", "c", 0, 5)).fetchall())  # type: ignore[attr-defined]

    shown = await db.read(plan)
    assert "tasks_created_by_principal" in shown
    assert "TEMP B-TREE" not in shown  # read newest first straight off the index, no sort
