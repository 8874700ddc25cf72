"""What only the PostgreSQL task store has to prove: several processes, NOTIFY and the database clock.

The behaviours both stores share are in tests/contract/; these need separate processes or
PostgreSQL's own mechanisms: claims racing from four processes, notifications that exist only for
committed changes and carry ids only, and leases compared on the database's clock.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator

import anyio
import psycopg
import pytest

from aml_mcp.store.locks import LockClass
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.db_clock import DatabaseClock
from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.storage import COLUMNS, Change, QuotaExceeded, TaskQuota, task_row
from aml_mcp.tasks.storage.postgres import (
    CHANNEL,
    CREATED_CHANNEL,
    DIALECT,
    MIGRATION,
    PostgresTaskStore,
    _TerminalRows,
    tenant_lock_name,
)
from aml_mcp.tasks.storage.postgres_signal import CREATED_SIGNAL_SPACING_SECONDS
from tests.support.clocks import OffsetClock
from tests.support.postgres import scratch_database
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000


@pytest.fixture
async def pg() -> AsyncIterator[PostgresDatabase]:
    async with scratch_database() as database:
        await database.apply(MIGRATION)
        yield database


async def test_four_processes_claiming_at_once_never_claim_a_task_twice(pg: PostgresDatabase) -> None:
    store = PostgresTaskStore(pg)
    tasks = [record(owner(subject=f"s{i % 7}"), now=NOW + i, holder=None) for i in range(400)]
    for task in tasks:
        await store.create(task)
    assert pg.schema is not None
    claims = await anyio.to_thread.run_sync(_claim_in_four_processes, pg.url, pg.schema)
    every = [task_id for claimed in claims for task_id in claimed]
    assert len(every) == len(set(every)) == 400, "a task was claimed twice, or one was never claimed"
    assert sum(1 for claimed in claims if claimed) >= 2, "the race did not race: one process took all"
    async with pg.transaction() as conn:
        cursor = await conn.execute("SELECT COUNT(*) FROM tasks WHERE attempts <> 2")
        row = await cursor.fetchone()
    assert row is not None and row[0] == 0


def _claim_in_four_processes(url: str, schema: str) -> list[list[str]]:
    """Four `claim_worker` processes, started together; the ids each claimed."""
    command = [sys.executable, "-m", "tests.support.claim_worker", url, schema]
    workers = [
        subprocess.Popen(
            [*command, f"w{n}", str(NOW + 10_000)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for n in range(4)
    ]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        for worker in workers:
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        return [json.loads(worker.communicate(timeout=60)[0]) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()


async def _listener(pg: PostgresDatabase) -> psycopg.AsyncConnection[object]:
    conn = await psycopg.AsyncConnection.connect(pg.url, autocommit=True, **pg.connect_kwargs())
    await conn.execute(f"LISTEN {pg.channel(CHANNEL)}")
    return conn


async def _drain(conn: psycopg.AsyncConnection[object], seconds: float) -> list[str]:
    return [notify.payload async for notify in conn.notifies(timeout=seconds)]


async def test_a_status_change_notifies_ids_only_and_at_commit(pg: PostgresDatabase) -> None:
    store = PostgresTaskStore(pg)
    task = record(owner(), now=NOW)
    await store.create(task)
    listener = await _listener(pg)
    try:
        intent = Change(cancel_requested=True, touch=False)
        assert await store.transition(task.task_id, task.owner, expected_version=1, change=intent, now_ms=NOW)
        assert await _drain(listener, 0.3) == [], "bookkeeping nobody sees is not announced"
        assert await store.transition(
            task.task_id, task.owner, expected_version=2, change=Change(status_message="50%"), now_ms=NOW
        )
        [progress] = await _drain(listener, 1.0)  # progress is: listen streams carry it
        done = Change(status=TaskStatus.COMPLETED, result={"content": [{"type": "text", "text": "SECRET"}]})
        assert await store.transition(task.task_id, task.owner, expected_version=3, change=done, now_ms=NOW)
        [payload] = await _drain(listener, 1.0)
    finally:
        await listener.close()
    body = json.loads(payload)
    who = task.owner
    assert json.loads(progress) == {
        "id": task.task_id,
        "v": 3,
        "o": [who.issuer, who.subject, who.tenant, who.client_id],
    }
    assert body == {"id": task.task_id, "v": 4, "o": [who.issuer, who.subject, who.tenant, who.client_id]}
    assert "SECRET" not in payload


async def test_a_rolled_back_change_notifies_nothing(pg: PostgresDatabase) -> None:
    store = PostgresTaskStore(pg)
    task = record(owner(), now=NOW)
    await store.create(task)
    # A check that fails at COMMIT, after the UPDATE and its pg_notify ran: the transaction rolls back.
    async with pg.transaction() as conn:
        await conn.execute(
            "CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN IF NEW.status_message = '\"boom\"' THEN RAISE EXCEPTION 'boom refused'; END IF;"
            " RETURN NEW; END; $$;"
            " CREATE CONSTRAINT TRIGGER refuse_boom AFTER UPDATE ON tasks DEFERRABLE INITIALLY DEFERRED"
            " FOR EACH ROW EXECUTE FUNCTION refuse_boom();"
        )
    listener = await _listener(pg)
    try:
        boom = Change(status=TaskStatus.INPUT_REQUIRED, status_message="boom", input_requests={"k": {}})
        with pytest.raises(psycopg.errors.RaiseException, match="boom refused"):
            await store.transition(task.task_id, task.owner, expected_version=1, change=boom, now_ms=NOW)
        assert await _drain(listener, 0.5) == []
        found = await store.find(task.task_id, task.owner, NOW)
        assert found is not None and found.version == 1 and found.status is TaskStatus.WORKING
        cancel = Change(status=TaskStatus.CANCELLED)
        assert await store.transition(task.task_id, task.owner, expected_version=1, change=cancel, now_ms=NOW)
        assert [json.loads(p)["v"] for p in await _drain(listener, 1.0)] == [2]
    finally:
        await listener.close()


async def test_a_process_whose_clock_runs_5s_fast_never_steals_a_live_lease(pg: PostgresDatabase) -> None:
    store = PostgresTaskStore(pg)
    honest = DatabaseClock(pg.now_ms)
    await honest.sync()
    lease_ms = 3_000
    start = honest.now_ms()
    task = record(owner(), now=start, holder="runner-live", lease_ms=lease_ms)
    await store.create(task)
    fast = OffsetClock(5_000)  # this host's wall clock runs 5 s ahead
    # Reading its own clock, the fast process would take the live lease over: the danger is real.
    assert fast.now_ms() > start + lease_ms
    # On the database's clock (measured with the fast clock as its local counter), it does not.
    skewed = DatabaseClock(pg.now_ms, local_ms=lambda: float(fast.now_ms()))
    await skewed.sync()
    assert abs(skewed.now_ms() - honest.now_ms()) < 250
    assert await store.claim("runner-fast", skewed.now_ms(), skewed.now_ms() + lease_ms, 10) == []
    # Once the lease really lapsed (on the database's clock), it may.
    await anyio.sleep((start + lease_ms + 1 - skewed.now_ms()) / 1000)
    [claimed] = await store.claim("runner-fast", skewed.now_ms(), skewed.now_ms() + lease_ms, 10)
    assert claimed.task_id == task.task_id and claimed.lease_holder == "runner-fast"


async def test_a_quota_counted_create_left_for_workers_signals_them_only_when_it_is_stored(
    pg: PostgresDatabase,
) -> None:
    """An API replica's create (unleased, quota counted) wakes idle workers at commit; a refused one
    wakes nobody. (The signal once read the window count instead of "inserted": the first create of
    a principal was stored without waking anyone, and workers found it at their next claim poll.)"""
    store = PostgresTaskStore(pg)
    quota = TaskQuota(active_per_principal=1, active_per_tenant=10, created_per_principal=5)
    conn = await psycopg.AsyncConnection.connect(pg.url, autocommit=True, **pg.connect_kwargs())
    await conn.execute(f"LISTEN {pg.channel(CREATED_CHANNEL)}")
    try:
        await store.create(record(owner(subject="first"), now=NOW, holder=None), quota)
        assert len(await _drain(conn, 1.0)) == 1
        with pytest.raises(QuotaExceeded):
            await store.create(record(owner(subject="first"), now=NOW + 1, holder=None), quota)
        assert await _drain(conn, 0.5) == []
    finally:
        await conn.close()


async def test_a_burst_of_creates_wakes_workers_with_fewer_signals_the_last_after_the_last_commit(
    pg: PostgresDatabase,
) -> None:
    """Each signal makes every idle worker claim (and one claim takes every waiting task), so a burst
    needs a few signals rather than one per create, but its last create must still be followed by
    one: else that task waits for the claim poll. A signal rides on a create's own statement when
    one is due (counted creates and plain ones alike), else is sent alone after the spacing: each
    signal heard counts the tasks committed by then, and the last must count them all."""
    store = PostgresTaskStore(pg)
    quota = TaskQuota(active_per_principal=100, active_per_tenant=100, created_per_principal=100)
    conn = await psycopg.AsyncConnection.connect(pg.url, autocommit=True, **pg.connect_kwargs())
    await conn.execute(f"LISTEN {pg.channel(CREATED_CHANNEL)}")
    heard: list[tuple[float, int]] = []

    async def hear() -> None:
        async for _ in conn.notifies(timeout=1.5):
            [(committed,)] = await pg.execute("SELECT COUNT(*) FROM tasks")
            heard.append((anyio.current_time(), committed))

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(hear)
            started = anyio.current_time()
            for i in range(60):
                task = record(owner(subject=f"s{i}"), now=NOW + i, holder=None)
                await store.create(task, quota if i % 2 else None)
            last_commit = anyio.current_time()
    finally:
        await conn.close()
    most = (last_commit - started) / CREATED_SIGNAL_SPACING_SECONDS + 2
    assert 1 <= len(heard) <= most, f"{len(heard)} signals for 60 creates in {last_commit - started:.3f} s"
    assert heard[-1][1] == 60, "the burst's last task was left for the claim poll"


async def test_a_create_queued_on_its_tenants_lock_counts_what_the_holder_committed(
    pg: PostgresDatabase,
) -> None:
    """The create is one statement, and its counts must still be read after the tenant's lock, not
    on the statement's snapshot taken before it: here the holder of the lock commits the tenant's
    only allowed task while the create waits, and the create must see it and refuse. (Counting in
    the statement itself, before the lock, would insert a second task past the cap.)"""
    store = PostgresTaskStore(pg)
    quota = TaskQuota(active_per_principal=5, active_per_tenant=1, created_per_principal=None)
    first = record(owner(subject="first"), now=NOW, holder="runner-a")
    holder = await psycopg.AsyncConnection.connect(pg.url, **pg.connect_kwargs())
    try:
        await holder.execute(
            "SELECT pg_advisory_xact_lock(%s, hashtext(%s))",
            (LockClass.TASKS_TENANT, tenant_lock_name(first.owner)),
        )
        outcome: list[BaseException | None] = []

        async def second_create() -> None:
            try:
                await store.create(record(owner(subject="second"), now=NOW + 1, holder="runner-b"), quota)
                outcome.append(None)
            except QuotaExceeded as exc:
                outcome.append(exc)

        async with anyio.create_task_group() as group:
            group.start_soon(second_create)
            await anyio.sleep(0.5)
            assert outcome == [], "the create did not wait for its tenant's lock"
            # The holder stores the tenant's one task (the row a create stores), then commits.
            row = task_row(first, DIALECT)
            placeholders = ", ".join(["%s"] * len(row))
            await holder.execute(f"INSERT INTO tasks ({COLUMNS}) VALUES ({placeholders})", row)  # noqa: S608
            await holder.commit()
    finally:
        await holder.close()
    [refused] = outcome
    assert isinstance(refused, QuotaExceeded) and refused.per == "tenant"
    rows = await pg.execute("SELECT COUNT(*) FROM tasks")
    assert rows == [(1,)]


async def test_a_finished_task_is_answered_from_memory_and_only_to_its_owner_until_it_expires(
    pg: PostgresDatabase,
) -> None:
    """A terminal row never changes and is deleted only after it expires, so a process answers it
    again without the database: here the row is deleted behind the store's back (as nothing but the
    sweeper of an expired task does) and the store that wrote the outcome still answers it, to its
    owner only, and not once it has expired. A store that never saw it reads the database."""
    store = PostgresTaskStore(pg)
    alice = owner(subject="alice")
    task = record(alice, now=NOW, ttl_ms=60_000)
    await store.create(task)
    done = await store.transition(
        task.task_id,
        alice,
        expected_version=task.version,
        change=Change(status=TaskStatus.COMPLETED, result={"content": []}),
        now_ms=NOW + 1,
    )
    assert done is not None and done.status is TaskStatus.COMPLETED
    await pg.execute("DELETE FROM tasks WHERE task_id = %s", (task.task_id,))

    kept = await store.find(task.task_id, alice, NOW + 2)
    assert kept == done
    assert await store.scope_of(task.task_id, alice, NOW + 2) == task.scope
    assert await store.find(task.task_id, owner(subject="mallory"), NOW + 2) is None
    assert await store.find(task.task_id, owner(subject="alice", client_id="other"), NOW + 2) is None
    assert await store.find(task.task_id, alice, task.expires_at) is None  # expired: gone from memory too
    assert await store.find(task.task_id, alice, NOW + 3) is None
    assert await PostgresTaskStore(pg).find(task.task_id, alice, NOW + 2) is None  # another replica


async def test_an_unfinished_task_is_always_read_from_the_database(pg: PostgresDatabase) -> None:
    """Only terminal rows are kept: a working task's row, changed by another process, reads changed."""
    store = PostgresTaskStore(pg)
    alice = owner(subject="alice")
    task = record(alice, now=NOW)
    await store.create(task)
    found = await store.find(task.task_id, alice, NOW + 1)
    assert found is not None and found.status_message is None
    other = PostgresTaskStore(pg)
    await other.transition(
        task.task_id,
        alice,
        expected_version=task.version,
        change=Change(status_message="half way"),
        now_ms=NOW + 2,
    )
    found = await store.find(task.task_id, alice, NOW + 3)
    assert found is not None and found.status_message == "half way"
    await other.transition(
        task.task_id,
        alice,
        expected_version=found.version,
        change=Change(status=TaskStatus.FAILED, error={"code": -32603, "message": "x"}),
        now_ms=NOW + 4,
    )
    found = await store.find(task.task_id, alice, NOW + 5)
    assert found is not None and found.status is TaskStatus.FAILED


def test_the_rows_kept_in_memory_stay_within_their_budget() -> None:
    """Bounded memory: the least recently read rows go first, and a row too large is never kept."""
    kept = _TerminalRows(budget=16_000)
    rows = [_row(f"t{n:03d}", "x" * 900) for n in range(100)]
    for row in rows:
        kept.keep(row)
    assert kept._bytes <= 16_000
    assert kept.find("t099", _OWNER, NOW) is not None and kept.find("t000", _OWNER, NOW) is None
    kept.keep(_row("huge", "x" * 1_100))  # over a sixteenth of the budget
    assert kept.find("huge", _OWNER, NOW) is None
    kept.keep(_row("working", "x", status="working"))
    assert kept.find("working", _OWNER, NOW) is None


_OWNER = (b"issuer", b"alice", b"bank-a", b"client-1")


def _row(task_id: str, result: str, status: str = "completed") -> tuple[object, ...]:
    columns = [name.strip() for name in COLUMNS.split(",")]
    values = dict(
        zip(("owner_issuer", "owner_subject", "owner_tenant", "owner_client_id"), _OWNER, strict=True)
    )
    values |= {"task_id": task_id, "status": status, "result": result, "expires_at": NOW + 60_000}
    return tuple(values.get(name) for name in columns)
