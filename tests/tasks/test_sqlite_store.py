"""The SQLite task store: owner-filtered lookups, compare-and-set, terminal immutability, leases, TTL."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio
import pytest

from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.sqlite_store import COMPONENT, MIGRATIONS, SqliteTaskStore
from aml_mcp.tasks.store import Change
from tests.tasks.factories import owner, principal_matrix, record

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


async def test_a_created_task_round_trips(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW, input_responses={"k": {"action": "accept"}})
    await store.create(task)
    assert await store.find(task.task_id, task.owner, NOW) == task
    assert await store.scope_of(task.task_id, task.owner, NOW) == "cases:read"


async def test_every_owner_field_is_part_of_the_lookup(store: SqliteTaskStore) -> None:
    mine = owner()
    task = record(mine, now=NOW)
    await store.create(task)
    for field in ("issuer", "subject", "tenant", "client_id"):
        other = replace(mine, **{field: getattr(mine, field) + "x"})
        assert await store.find(task.task_id, other, NOW) is None
        assert await store.scope_of(task.task_id, other, NOW) is None
        assert not await store.transition(
            task.task_id, other, expected_version=1, change=Change(status_message="x"), now_ms=NOW
        )
    assert await store.find(task.task_id, mine, NOW) == task


async def test_joined_string_collisions_stay_apart(store: SqliteTaskStore) -> None:
    first, second, third, fourth = principal_matrix()[-4:]
    task = record(first, now=NOW)
    await store.create(task)
    assert await store.find(task.task_id, second, NOW) is None
    other = record(third, now=NOW)
    await store.create(other)
    assert await store.find(other.task_id, fourth, NOW) is None
    assert await store.find(other.task_id, third, NOW) == other


async def test_expired_tasks_are_invisible_and_ttl_never_slides(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW, ttl_ms=1000)
    await store.create(task)
    for moment in (NOW, NOW + 500, NOW + 999):
        found = await store.find(task.task_id, task.owner, moment)
        assert found is not None and found.expires_at == NOW + 1000
    assert await store.transition(
        task.task_id, task.owner, expected_version=1, change=Change(status_message="m"), now_ms=NOW + 900
    )
    assert await store.find(task.task_id, task.owner, NOW + 1000) is None
    assert await store.scope_of(task.task_id, task.owner, NOW + 1000) is None
    assert not await store.transition(
        task.task_id, task.owner, expected_version=2, change=Change(status_message="n"), now_ms=NOW + 1000
    )


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


async def test_compare_and_set_needs_the_current_version(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW)
    await store.create(task)
    change = Change(status_message="first")
    updated = await store.transition(
        task.task_id, task.owner, expected_version=1, change=change, now_ms=NOW + 5
    )
    assert updated is not None and updated.version == 2 and updated.status_message == "first"
    assert updated == await store.find(task.task_id, task.owner, NOW + 5)
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=change, now_ms=NOW + 6
    )
    found = await store.find(task.task_id, task.owner, NOW + 6)
    assert found is not None and found.version == 2 and found.updated_at == NOW + 5


async def test_untouched_changes_keep_last_updated_at(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW)
    await store.create(task)
    assert await store.transition(
        task.task_id,
        task.owner,
        expected_version=1,
        change=Change(cancel_requested=True, touch=False),
        now_ms=NOW + 50,
    )
    found = await store.find(task.task_id, task.owner, NOW + 60)
    assert found is not None and found.cancel_requested and found.updated_at == NOW


async def test_a_terminal_task_never_changes(db: SqliteDatabase, store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW)
    await store.create(task)
    done = Change(status=TaskStatus.COMPLETED, result={"content": []})
    assert await store.transition(task.task_id, task.owner, expected_version=1, change=done, now_ms=NOW + 1)
    final = await store.find(task.task_id, task.owner, NOW + 2)
    assert final is not None and final.status is TaskStatus.COMPLETED and final.lease_holder is None
    for change in (
        Change(status=TaskStatus.CANCELLED),
        Change(status=TaskStatus.WORKING),
        Change(status_message="late"),
        Change(cancel_requested=True, touch=False),
    ):
        assert not await store.transition(
            task.task_id, task.owner, expected_version=2, change=change, now_ms=NOW + 3
        )
    assert (await store.renew("runner-1", NOW + 99_999, NOW + 3)).held == frozenset()
    assert await store.claim("runner-2", NOW + 10**9, NOW + 10**9 + 1, 10) == []
    assert await store.find(task.task_id, task.owner, NOW + 4) == final
    # The trigger is the second wall: even a hand-written statement cannot touch the row.
    with pytest.raises(sqlite3.IntegrityError, match="terminal task never changes"):
        await db.write(
            lambda c: c.execute("UPDATE tasks SET status = 'working' WHERE task_id = ?", (task.task_id,))
        )


async def test_identity_owner_and_expiry_are_fixed_by_trigger(
    db: SqliteDatabase, store: SqliteTaskStore
) -> None:
    task = record(owner(), now=NOW)
    await store.create(task)
    for assignment in (
        "owner_subject = 'mallory'",
        "owner_tenant = 'bank-z'",
        "expires_at = expires_at + 1",
        "version = 0",
    ):
        with pytest.raises(sqlite3.IntegrityError, match="never change"):
            await db.write(
                lambda c, a=assignment: c.execute(f"UPDATE tasks SET {a} WHERE task_id = ?", (task.task_id,))  # noqa: S608
            )
    assert await store.find(task.task_id, task.owner, NOW) == task


async def test_completion_racing_cancellation_has_one_winner(store: SqliteTaskStore) -> None:
    for _ in range(20):
        task = record(owner(), now=NOW)
        await store.create(task)
        outcomes: dict[str, bool] = {}

        async def attempt(
            name: str, change: Change, holder: str | None, current: Any = task, outcomes: Any = outcomes
        ) -> None:
            updated = await store.transition(
                current.task_id,
                current.owner,
                expected_version=1,
                change=change,
                now_ms=NOW + 1,
                holder=holder,
            )
            outcomes[name] = updated is not None

        async with anyio.create_task_group() as group:
            group.start_soon(
                attempt, "completed", Change(status=TaskStatus.COMPLETED, result={"content": []}), "runner-1"
            )
            group.start_soon(attempt, "cancelled", Change(status=TaskStatus.CANCELLED), None)
        assert sorted(outcomes.values()) == [False, True]
        final = await store.find(task.task_id, task.owner, NOW + 2)
        winner = next(name for name, won in outcomes.items() if won)
        assert final is not None and final.status.value == winner


async def test_holder_condition_and_lease_free_condition(store: SqliteTaskStore) -> None:
    task = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    await store.create(task)
    message = Change(status_message="m")
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW, holder="runner-2"
    )
    assert not await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW + 999, lease_free=True
    )
    assert await store.transition(
        task.task_id, task.owner, expected_version=1, change=message, now_ms=NOW + 1000, lease_free=True
    )


async def test_leases_renew_claim_and_release(store: SqliteTaskStore) -> None:
    mine = record(owner(), now=NOW, holder="runner-1", lease_ms=1000)
    cancelled = record(owner(), now=NOW, holder="runner-1", lease_ms=1000, cancel_requested=True)
    theirs = record(owner(), now=NOW, holder="runner-2", lease_ms=1000)
    for task in (mine, cancelled, theirs):
        await store.create(task)
    report = await store.renew("runner-1", NOW + 5000, NOW + 500)
    assert report.held == {mine.task_id, cancelled.task_id}
    assert report.cancel_requested == {cancelled.task_id}
    # runner-2 stopped heartbeating: its task is claimable once the lease lapses, runner-1's are not.
    claimed = await store.claim("runner-3", NOW + 1000, NOW + 9000, 10)
    assert [task.task_id for task in claimed] == [theirs.task_id]
    assert claimed[0].lease_holder == "runner-3" and claimed[0].attempts == 2
    assert await store.claim("runner-4", NOW + 1000, NOW + 9000, 10) == []
    await store.release("runner-1")
    reclaimed = await store.claim("runner-4", NOW + 1001, NOW + 9000, 10)
    assert {task.task_id for task in reclaimed} == {mine.task_id, cancelled.task_id}
    assert (await store.renew("runner-1", NOW + 9999, NOW + 1002)).held == frozenset()


async def test_sweep_deletes_only_expired_tasks(store: SqliteTaskStore) -> None:
    short = [record(owner(), now=NOW, ttl_ms=100) for _ in range(5)]
    long = record(owner(), now=NOW, ttl_ms=10_000)
    for task in [*short, long]:
        await store.create(task)
    assert await store.sweep(NOW + 99, 100) == 0
    assert await store.sweep(NOW + 100, 3) == 3
    assert await store.sweep(NOW + 100, 3) == 2
    assert await store.find(long.task_id, long.owner, NOW + 100) == long


async def test_concurrent_creates_are_all_durable(
    db: SqliteDatabase, store: SqliteTaskStore, tmp_path: Path
) -> None:
    tasks = [record(owner(subject=f"s{i}"), now=NOW) for i in range(100)]
    async with anyio.create_task_group() as group:
        for task in tasks:
            group.start_soon(store.create, task)
    # A fresh connection (as after a restart) sees every acknowledged create.
    conn = sqlite3.connect(tmp_path / "tasks.db")
    try:
        assert conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 100
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
