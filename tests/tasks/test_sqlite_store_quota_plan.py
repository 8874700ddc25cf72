"""The SQLite quota count uses its owner index (the behaviour itself is in tests/contract/)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.sqlite_store import COMPONENT, MIGRATIONS, SqliteTaskStore
from aml_mcp.tasks.store import TaskQuota
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
