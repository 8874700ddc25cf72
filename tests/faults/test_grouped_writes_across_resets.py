"""Creates and outcomes that share a transaction (`tasks/storage/postgres_grouped.py`) while every
aml-mcp connection is terminated again and again, on a server of the test's own.

A group that loses its connection must fail every one of its callers as a storage fault (retryable),
and must have landed whole or not at all: a caller that retries (an outcome from a fresh read, a
create with its idempotency key, as the runner and the clients do) ends with exactly one outcome per
task and one task per key, and no quota is exceeded on the way.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import anyio
import pytest

from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.storage import Change, QuotaExceeded, StorageUnavailable, TaskQuota
from aml_mcp.tasks.storage.postgres import MIGRATION, PostgresTaskStore
from tests.support.private_postgres import PrivatePostgres
from tests.tasks.factories import owner, record

pytestmark = [pytest.mark.faults, pytest.mark.anyio]

NOW = 1_800_000_000_000
HOLDER = "runner-1"
ROUNDS = 30


@pytest.fixture
async def store(private_postgres: PrivatePostgres) -> AsyncIterator[PostgresTaskStore]:
    database = PostgresDatabase(private_postgres.url, schema=f"grouped_{secrets.token_hex(4)}")
    await database.open()
    try:
        await database.apply(MIGRATION)
        yield PostgresTaskStore(database)
    finally:
        await database.close()


class Resets:
    """Terminates every aml-mcp connection every 100 ms, from `start()` until `stop()`."""

    def __init__(self, server: PrivatePostgres) -> None:
        self._server = server
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._keep_terminating, daemon=True)

    def _keep_terminating(self) -> None:
        while not self._stopped.wait(0.1):
            self._server.terminate_all()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)


@pytest.fixture
def resets(private_postgres: PrivatePostgres) -> Iterator[Resets]:
    resets = Resets(private_postgres)
    yield resets
    resets.stop()


RETRY_SECONDS = 60.0
"""How long a caller retries a storage fault (the pool reconnects within a few seconds)."""


async def _retried(attempt: Callable[[], Awaitable[None]]) -> int:
    """`attempt` again after each storage fault, as the runner and the clients do, until it gets
    through; how many faults it met."""
    faults = 0
    give_up = anyio.current_time() + RETRY_SECONDS
    while anyio.current_time() < give_up:
        try:
            await attempt()
            return faults
        except StorageUnavailable:
            faults += 1
            await anyio.sleep(0.02)
    raise AssertionError("the store never came back")


async def test_outcomes_of_groups_that_lose_their_connection_land_exactly_once(
    store: PostgresTaskStore, resets: Resets
) -> None:
    faults = 0
    tasks = [record(owner(subject=f"s{i % 4}"), now=NOW + i, holder=HOLDER) for i in range(40 * ROUNDS)]
    for task in tasks:
        await store.create(task)
    resets.start()
    for round_ in range(ROUNDS):
        batch = tasks[40 * round_ : 40 * (round_ + 1)]

        async def finish(task: TaskRecord) -> None:
            nonlocal faults
            result = {"content": [{"type": "text", "text": task.task_id}]}
            done = Change(status=TaskStatus.COMPLETED, result=result)

            async def attempt() -> None:
                current = await store.find(task.task_id, task.owner, NOW + 10)
                assert current is not None
                if current.terminal:
                    return  # the group committed before its connection died
                await store.transition(
                    task.task_id,
                    task.owner,
                    expected_version=current.version,
                    change=done,
                    now_ms=NOW + 10,
                    holder=HOLDER,
                )

            faults += await _retried(attempt)

        async with anyio.create_task_group() as group:
            for task in batch:
                group.start_soon(finish, task)
        finished = 40 * (round_ + 1)
        if faults and round_ >= 2:
            break
    resets.stop()
    assert faults, "no group lost its connection: the test tested nothing"
    for task in tasks[:finished]:
        found = await store.find(task.task_id, task.owner, NOW + 20)
        assert found is not None and found.status is TaskStatus.COMPLETED, task.task_id
        assert found.version == 2, f"{task.task_id}: applied {found.version - 1} times"
        assert found.result == {"content": [{"type": "text", "text": task.task_id}]}


async def test_creates_of_groups_that_lose_their_connection_store_one_task_per_key_within_quota(
    store: PostgresTaskStore, resets: Resets
) -> None:
    quota = TaskQuota(active_per_principal=1000, active_per_tenant=45, created_per_principal=10_000)
    faults = 0
    refused = 0
    keys: list[str] = []
    resets.start()
    for round_ in range(ROUNDS):

        async def create(round_: int, i: int) -> None:
            nonlocal faults, refused
            key = f"key-{round_}-{i}"
            keys.append(key)
            task = record(owner(subject=f"s{i % 4}", tenant=f"bank-{i % 3}"), now=NOW + i, holder=HOLDER)

            async def attempt() -> None:
                nonlocal refused
                try:
                    await store.create(task, quota, idempotency_key=key)
                except QuotaExceeded:
                    refused += 1

            faults += await _retried(attempt)

        async with anyio.create_task_group() as group:
            for i in range(30):
                group.start_soon(create, round_, i)
        if faults and round_ >= 2:
            break
    resets.stop()
    assert faults, "no group lost its connection: the test tested nothing"
    database = store._db
    rows = await database.execute(
        "SELECT convert_from(owner_tenant, 'UTF8'), idempotency_key FROM tasks ORDER BY 1, 2"
    )
    stored_keys = [key for _, key in rows]
    assert len(stored_keys) == len(set(stored_keys)), "a key stored two tasks"
    per_tenant = {tenant: sum(1 for t, _ in rows if t == tenant) for tenant, _ in rows}
    assert all(count <= 45 for count in per_tenant.values()), per_tenant
    assert len(stored_keys) + refused == len(keys), "a create neither stored nor refused"
