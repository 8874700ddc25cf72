"""A task's progress (status message and `aml-mcp/progress`) in the store, on SQLite and PostgreSQL alike.

It is kept with the task (so any replica answers it), changed by the same compare-and-set as any
state, and never lands on a finished task: a throttled progress write that arrives after the
outcome (its expected version is the one before the outcome) changes nothing, and neither does one
that names the current version of a terminal row.
"""

from __future__ import annotations

import json

import pytest

from aml_mcp.tasks.model import Progress, TaskStatus
from aml_mcp.tasks.storage import Change
from tests.contract.conftest import Backend
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000_000


async def test_progress_round_trips_through_create_and_transition(backend: Backend) -> None:
    store = backend.store
    task = record(owner(), now=NOW, progress=Progress(0, 504), status_message="drafting 504 cases")
    await store.create(task)
    assert await store.find(task.task_id, task.owner, NOW) == task
    change = Change(status_message="drafted 26/504 cases", progress=Progress(26, 504))
    updated = await store.transition(task.task_id, task.owner, expected_version=1, change=change, now_ms=NOW)
    assert updated is not None and updated.progress == Progress(26, 504) and updated.version == 2
    found = await store.find(task.task_id, task.owner, NOW)
    assert found is not None and found.progress == Progress(26, 504)
    assert found.status_message == "drafted 26/504 cases"
    unknown_total = Change(progress=Progress(2.5))
    later = await store.transition(
        task.task_id, task.owner, expected_version=2, change=unknown_total, now_ms=NOW
    )
    assert later is not None and later.progress == Progress(2.5) and later.progress.wire() == {"done": 2.5}
    assert later.status_message == "drafted 26/504 cases", "a change without a message keeps it"


async def test_a_task_without_progress_reads_back_without_it(backend: Backend) -> None:
    task = record(owner(), now=NOW)
    await backend.store.create(task)
    found = await backend.store.find(task.task_id, task.owner, NOW)
    assert found is not None and found.progress is None


@pytest.mark.parametrize("outcome", [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED])
async def test_a_progress_write_after_the_outcome_changes_nothing(
    backend: Backend, outcome: TaskStatus
) -> None:
    store = backend.store
    task = record(owner(), now=NOW, holder="runner-1")
    await store.create(task)
    progressed = await store.transition(
        task.task_id,
        task.owner,
        expected_version=1,
        change=Change(status_message="drafted 10/20 cases", progress=Progress(10, 20)),
        now_ms=NOW,
        holder="runner-1",
    )
    assert progressed is not None
    ending = Change(
        status=outcome,
        status_message="the end",
        result={"content": []} if outcome is TaskStatus.COMPLETED else None,
        error={"code": -32603, "message": "x"} if outcome is TaskStatus.FAILED else None,
        progress=Progress(20, 20),
    )
    ended = await store.transition(
        task.task_id, task.owner, expected_version=2, change=ending, now_ms=NOW + 1, holder="runner-1"
    )
    assert ended is not None and ended.status is outcome
    late = Change(status_message="drafted 19/20 cases", progress=Progress(19, 20))
    for version in (2, 3):  # the version the writer last saw, and the terminal row's own
        for holder in ("runner-1", None):
            assert (
                await store.transition(
                    task.task_id,
                    task.owner,
                    expected_version=version,
                    change=late,
                    now_ms=NOW + 2,
                    holder=holder,
                )
                is None
            )
    assert await store.find(task.task_id, task.owner, NOW + 3) == ended


async def test_on_postgresql_a_progress_write_is_announced_in_its_own_transaction() -> None:
    """A listen stream on another replica hears progress only through NOTIFY: a change of the status
    message or of the structured progress alone sends one (ids only), as a status change does."""
    import psycopg
    from psycopg import sql

    from aml_mcp.tasks.storage import postgres as postgres_tasks
    from aml_mcp.tasks.storage.postgres import CHANNEL, PostgresTaskStore
    from tests.support.postgres import scratch_database

    async with scratch_database() as database:
        await database.apply(postgres_tasks.MIGRATION)
        store = PostgresTaskStore(database)
        task = record(owner(), now=NOW)
        await store.create(task)
        channel = database.channel(CHANNEL)
        async with await psycopg.AsyncConnection.connect(
            database.url, autocommit=True, **database.connect_kwargs()
        ) as listener:
            await listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            changes = [
                Change(status_message="drafted 1/2 cases", progress=Progress(1, 2)),
                Change(progress=Progress(2, 2)),
                Change(status_message="checking"),
            ]
            for version, change in enumerate(changes, 1):
                assert await store.transition(
                    task.task_id, task.owner, expected_version=version, change=change, now_ms=NOW
                )
            heard = []
            async for notify in listener.notifies(timeout=2.0, stop_after=len(changes)):
                heard.append(notify.payload)
        assert [json.loads(payload)["v"] for payload in heard] == [2, 3, 4]
        assert all(json.loads(payload)["id"] == task.task_id for payload in heard)
