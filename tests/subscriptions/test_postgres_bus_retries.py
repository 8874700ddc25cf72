"""The event bus owes what failed (D2): a resync hook that fails is run again, with backoff, until
it succeeds, and a notified task whose lookup fails is looked up again, then made up by a resync.

Before, a failing hook was logged and counted as a completed resync, and a failed lookup dropped
its notification: a listen stream then waited forever for a final state the table already held.
The failures here are the callbacks' own (the database stays up), so they run on the shared test
server; the connection faults themselves are in `tests/faults/`.
"""

from __future__ import annotations

import anyio
import psycopg
import pytest

from aml_mcp.principal import Owner
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.subscriptions.events import Event, TaskChanged
from aml_mcp.subscriptions.followed import FollowedTasks
from aml_mcp.subscriptions.postgres_bus import TASK_CHANNEL, PgEventBus
from tests.support.postgres import scratch_database

OWNER = Owner("i", "s", "t", "c")
PAYLOAD = '{"id":"t1","v":2,"o":["i","s","t","c"]}'


async def _notify(database: PostgresDatabase, payload: str = PAYLOAD) -> None:
    async with await psycopg.AsyncConnection.connect(database.url, autocommit=True) as conn:
        await conn.execute("SELECT pg_notify(%s, %s)", (database.channel(TASK_CHANNEL), payload))


def _bus(database: PostgresDatabase, resolve: object, **options: object) -> PgEventBus:
    followed = FollowedTasks()
    followed.follow(["t1"])
    return PgEventBus(
        database,
        resolve=resolve,  # type: ignore[arg-type]
        followed=followed,
        liveness_seconds=0.2,
        first_backoff_seconds=0.02,
        max_backoff_seconds=0.1,
        jitter=lambda: 0.5,
        **options,  # type: ignore[arg-type]
    )


async def _nothing(task_id: str, owner: Owner) -> Event | None:
    return None


@pytest.mark.anyio
async def test_a_failing_resync_hook_is_run_again_until_it_succeeds_and_only_then_counted() -> None:
    calls: list[int] = []
    paid = anyio.Event()

    async def hook() -> None:
        calls.append(bus.resyncs)
        if len(calls) <= 3:
            raise RuntimeError("task storage unavailable: database unreachable")
        paid.set()

    async with scratch_database() as database:
        bus = _bus(database, _nothing)
        bus.on_resync(hook)
        async with bus.running():
            with anyio.fail_after(5):
                await paid.wait()
            await anyio.sleep(0.3)  # nothing more is owed: no further run
    assert calls == [0, 0, 0, 0], "every failed run was owed again, and none was counted as done"
    assert bus.resyncs == 1 and bus.resync_failures == 3


@pytest.mark.anyio
async def test_a_notified_task_whose_lookup_fails_is_looked_up_again_and_delivered() -> None:
    lookups: list[str] = []
    delivered: list[Event] = []
    arrived = anyio.Event()

    async def flaky(task_id: str, owner: Owner) -> Event | None:
        lookups.append(task_id)
        if len(lookups) <= 2:
            raise RuntimeError("task storage unavailable: database unreachable")
        return TaskChanged(owner, task_id, None, {"taskId": task_id, "status": "completed"}, 2)

    def deliver(event: Event) -> None:
        delivered.append(event)
        arrived.set()

    async with scratch_database() as database:
        bus = _bus(database, flaky)
        bus.subscribe(deliver)
        async with bus.running():
            await _notify(database)
            with anyio.fail_after(5):
                await arrived.wait()
    assert lookups == ["t1", "t1", "t1"]
    assert [event.task_id for event in delivered if isinstance(event, TaskChanged)] == ["t1"]


@pytest.mark.anyio
async def test_a_lookup_that_keeps_failing_owes_a_resync_which_is_retried_until_it_succeeds() -> None:
    lookups: list[str] = []
    rounds: list[str] = []
    made_up = anyio.Event()

    async def broken(task_id: str, owner: Owner) -> Event | None:
        lookups.append(task_id)
        raise RuntimeError("task storage unavailable: database unreachable")

    async def hook() -> None:
        rounds.append("run")
        if len(rounds) == 2:
            raise RuntimeError("still unreachable")
        if len(rounds) >= 3:
            made_up.set()

    async with scratch_database() as database:
        bus = _bus(database, broken, lookup_attempts=3)
        bus.subscribe(lambda event: None)
        bus.on_resync(hook)
        async with bus.running():
            assert rounds == ["run"]  # the connect's own resync
            await _notify(database)
            with anyio.fail_after(5):
                await made_up.wait()
    assert lookups == ["t1"] * 3, "looked up three times, then given up to a resync"
    assert len(rounds) == 3 and bus.resyncs == 2 and bus.lookup_failures == 3
