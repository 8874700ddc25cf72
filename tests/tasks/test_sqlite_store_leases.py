"""The SQLite task store's lease bookkeeping and quota count, on a real file."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.sqlite_store import COMPONENT, MIGRATIONS, SqliteTaskStore
from aml_mcp.tasks.store import QuotaExceeded, TaskQuota
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


async def test_a_heartbeat_renews_only_the_tasks_it_names(store: SqliteTaskStore) -> None:
    live = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    dead = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    for task in (live, dead):
        await store.create(task)
    report = await store.renew("runner-1", NOW + 5000, NOW + 500, task_ids=[live.task_id])
    assert report.held == {live.task_id}
    claimed = await store.claim("runner-2", NOW + 1000, NOW + 9000, 10)
    assert [task.task_id for task in claimed] == [dead.task_id]  # its lease lapsed: nobody renewed it


async def test_a_graceful_release_counts_a_handover_only_for_the_runs_it_stopped(
    store: SqliteTaskStore,
) -> None:
    stopped = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    unstarted = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    for task in (stopped, unstarted):
        await store.create(task)
    await store.release("runner-1", [stopped.task_id])
    claimed = {task.task_id: task for task in await store.claim("runner-2", NOW + 1, NOW + 9000, 10)}
    assert (claimed[stopped.task_id].attempts, claimed[stopped.task_id].handovers) == (2, 1)
    assert claimed[stopped.task_id].counted_attempts == 1
    assert (claimed[unstarted.task_id].attempts, claimed[unstarted.task_id].handovers) == (2, 0)


async def test_an_abandoned_task_is_held_by_nobody_and_claimed_at_once(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW, holder="runner-1", lease_ms=60_000)
    await store.create(task)
    await store.abandon(task.task_id, "runner-2")  # not its holder: nothing happens
    assert await store.claim("runner-3", NOW + 1, NOW + 9000, 10) == []
    await store.abandon(task.task_id, "runner-1")
    found = await store.find(task.task_id, task.owner, NOW + 1)
    assert found is not None and found.lease_holder is None and found.status is TaskStatus.WORKING
    [claimed] = await store.claim("runner-3", NOW + 1, NOW + 9000, 10)
    assert claimed.task_id == task.task_id and claimed.attempts == 2 and claimed.handovers == 0


async def test_a_claim_skips_the_tasks_the_claimer_still_runs(store: SqliteTaskStore) -> None:
    mine = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    await store.create(mine)
    assert await store.claim("runner-1", NOW + 2000, NOW + 9000, 10, exclude=[mine.task_id]) == []
    assert [t.task_id for t in await store.claim("runner-1", NOW + 2000, NOW + 9000, 10)] == [mine.task_id]


async def test_the_quota_counts_unfinished_unexpired_tasks_by_principal_and_tenant(
    db: SqliteDatabase, store: SqliteTaskStore
) -> None:
    quota = TaskQuota(active_per_principal=2, active_per_tenant=3)
    alice, alice_elsewhere, bob = owner("alice"), owner("alice", client_id="client-2"), owner("bob")
    await store.create(record(alice, now=NOW), quota)
    await store.create(record(alice_elsewhere, now=NOW), quota)
    with pytest.raises(QuotaExceeded) as caught:
        await store.create(record(alice, now=NOW), quota)
    assert (caught.value.per, caught.value.limit) == ("principal", 2)
    await store.create(record(alice, now=NOW, status=TaskStatus.CANCELLED, holder=None), None)
    await store.create(record(bob, now=NOW - 10_000, ttl_ms=5_000), None)  # expired: not counted
    await store.create(record(bob, now=NOW), quota)
    with pytest.raises(QuotaExceeded) as caught:
        await store.create(record(bob, now=NOW), quota)
    assert caught.value.per == "tenant"
    await store.create(record(owner("carol", tenant="bank-b"), now=NOW), quota)

    def plan(conn: object) -> str:
        sql = (
            "EXPLAIN QUERY PLAN SELECT COUNT(*) FROM tasks WHERE owner_tenant = 'a' AND owner_issuer = 'b'"
            " AND status IN ('working', 'input_required') AND expires_at > 0"
        )
        return json.dumps(conn.execute(sql).fetchall())  # type: ignore[attr-defined]

    assert "tasks_active_by_owner" in await db.read(plan)
