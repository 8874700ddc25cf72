"""Creates and runners' outcomes on PostgreSQL share commits (`tasks/storage/postgres_grouped.py`),
and lose nothing by it: every outcome lands and is announced, a refused one fails alone, the lease
heartbeat, which locks many of the same rows, never deadlocks with a group, and grouped creates
keep every quota exact."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.storage import Change, QuotaExceeded, TaskQuota
from aml_mcp.tasks.storage.postgres import CHANNEL, MIGRATION, PostgresTaskStore
from tests.support.postgres import scratch_database
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000
HOLDER = "runner-1"


@pytest.fixture
async def pg() -> AsyncIterator[PostgresDatabase]:
    async with scratch_database() as database:
        await database.apply(MIGRATION)
        yield database


async def _working(store: PostgresTaskStore, count: int) -> list[TaskRecord]:
    tasks = [record(owner(subject=f"s{i % 5}"), now=NOW + i, holder=HOLDER) for i in range(count)]
    for task in tasks:
        await store.create(task)
    return tasks


async def _complete(store: PostgresTaskStore, task: TaskRecord, into: dict[str, TaskRecord | None]) -> None:
    done = Change(status=TaskStatus.COMPLETED, result={"content": [{"type": "text", "text": task.task_id}]})
    into[task.task_id] = await store.transition(
        task.task_id, task.owner, expected_version=task.version, change=done, now_ms=NOW + 5, holder=HOLDER
    )


async def test_outcomes_finishing_together_share_commits_and_each_lands_and_is_announced(
    pg: PostgresDatabase,
) -> None:
    store = PostgresTaskStore(pg)
    tasks = await _working(store, 40)
    listener = await psycopg.AsyncConnection.connect(pg.url, autocommit=True, **pg.connect_kwargs())
    await listener.execute(f"LISTEN {pg.channel(CHANNEL)}")
    try:
        answers: dict[str, TaskRecord | None] = {}
        async with anyio.create_task_group() as group:
            for task in tasks:
                group.start_soon(_complete, store, task, answers)
        heard = [json.loads(n.payload)["id"] async for n in listener.notifies(timeout=1.0)]
    finally:
        await listener.close()
    for task in tasks:
        answer = answers[task.task_id]
        assert answer is not None and answer.status is TaskStatus.COMPLETED and answer.version == 2
        assert answer.result == {"content": [{"type": "text", "text": task.task_id}]}
    assert sorted(heard) == sorted(task.task_id for task in tasks), "an outcome was not announced"
    async with pg.transaction() as conn:
        cursor = await conn.execute(
            "SELECT COUNT(*), COUNT(DISTINCT xmin::text) FROM tasks WHERE status = 'completed'"
        )
        stored, commits = await cursor.fetchone() or (0, 0)
    assert stored == 40
    assert commits < 40, "every outcome was its own transaction: none shared a commit"


async def test_an_outcome_the_database_refuses_fails_alone_and_its_group_still_lands(
    pg: PostgresDatabase,
) -> None:
    store = PostgresTaskStore(pg)
    tasks = await _working(store, 12)
    refused = tasks[5]
    async with pg.transaction() as conn:
        await conn.execute(
            "CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$"
            f" BEGIN IF NEW.task_id = '{refused.task_id}' THEN RAISE EXCEPTION 'one refused'; END IF;"
            " RETURN NEW; END; $$;"
            " CREATE TRIGGER refuse_one BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION refuse_one();"
        )
    answers: dict[str, TaskRecord | None] = {}
    errors: list[BaseException] = []

    async def complete(task: TaskRecord) -> None:
        try:
            await _complete(store, task, answers)
        except psycopg.errors.RaiseException as exc:
            errors.append(exc)

    async with anyio.create_task_group() as group:
        for task in tasks:
            group.start_soon(complete, task)
    assert [str(exc).splitlines()[0] for exc in errors] == ["one refused"]
    assert refused.task_id not in answers
    for task in tasks:
        found = await store.find(task.task_id, task.owner, NOW + 10)
        assert found is not None
        expected = TaskStatus.WORKING if task is refused else TaskStatus.COMPLETED
        assert found.status is expected, task.task_id


async def test_the_lease_heartbeat_and_groups_of_outcomes_never_deadlock(pg: PostgresDatabase) -> None:
    store = PostgresTaskStore(pg)
    tasks = await _working(store, 120)
    answers: dict[str, TaskRecord | None] = {}
    finished = anyio.Event()

    async def heartbeat() -> None:
        while not finished.is_set():
            await store.renew(HOLDER, NOW + 60_000, NOW + 1)

    with anyio.fail_after(30):  # a deadlock PostgreSQL broke would fail a statement; one it missed, hang
        async with anyio.create_task_group() as group:
            for _ in range(2):
                group.start_soon(heartbeat)
            async with anyio.create_task_group() as outcomes:
                for task in tasks:
                    outcomes.start_soon(_complete, store, task, answers)
            finished.set()
    assert all(answers[task.task_id] is not None for task in tasks)


async def test_creates_arriving_together_share_commits_and_each_tenants_quota_stays_exact(
    pg: PostgresDatabase,
) -> None:
    """Sixty creates at once from three banks of two analysts each; a bank may have 7 unfinished
    tasks and an analyst 5, so both counts bind. Grouped, each statement still counts under its
    tenant's lock and sees what the group's earlier statements inserted."""
    store = PostgresTaskStore(pg)
    quota = TaskQuota(active_per_principal=5, active_per_tenant=7, created_per_principal=1000)
    outcomes: list[str] = []

    async def create(i: int) -> None:
        task = record(owner(subject=f"a{i % 6}", tenant=f"bank-{i % 3}"), now=NOW + i, holder=None)
        try:
            await store.create(task, quota)
            outcomes.append("stored")
        except QuotaExceeded as refused:
            outcomes.append(refused.per)

    async with anyio.create_task_group() as group:
        for i in range(60):
            group.start_soon(create, i)
    async with pg.transaction() as conn:
        cursor = await conn.execute(
            "SELECT convert_from(owner_tenant, 'UTF8'), COUNT(*), MAX(n) FROM"
            " (SELECT owner_tenant, COUNT(*) OVER (PARTITION BY owner_subject) AS n FROM tasks) t"
            " GROUP BY 1 ORDER BY 1"
        )
        per_tenant = await cursor.fetchall()
        cursor = await conn.execute("SELECT COUNT(DISTINCT xmin::text) FROM tasks")
        [commits] = await cursor.fetchone() or (0,)
    assert [(tenant, count) for tenant, count, _ in per_tenant] == [
        ("bank-0", 7),
        ("bank-1", 7),
        ("bank-2", 7),
    ]
    assert all(most <= 5 for _, _, most in per_tenant), "an analyst has more than 5 unfinished tasks"
    assert outcomes.count("stored") == 21 and len(outcomes) == 60
    assert commits < 21, "every create was its own transaction: none shared a commit"
