"""The runner: how bodies end, cooperative cancellation, input during a task, leases and recovery."""

from __future__ import annotations

import random
import time
from pathlib import Path

import anyio
import pytest

from aml_mcp.principal import Owner
from aml_mcp.tasks.inputs import take_answers
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.service import CancelVerdict, UpdateVerdict
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage import Change
from tests.tasks.factories import owner, record, state
from tests.tasks.harness import FAST, Gates, harness

pytestmark = pytest.mark.anyio

ALICE = owner()


def accept(name: str) -> dict[str, object]:
    return {"action": "accept", "content": {"name": name}}


async def test_a_result_completes_the_task(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("echo", ALICE, {"text": "hi"})
        assert task.status is TaskStatus.WORKING and task.attempts == 1
        done = await h.settled(task)
        assert done.status is TaskStatus.COMPLETED
        assert done.result == {
            "content": [{"type": "text", "text": "hi"}],
            "isError": False,
            "resultType": "complete",
        }
        assert done.error is None and done.lease_holder is None


async def test_a_tool_error_is_completed_with_is_error(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        done = await h.settled(await h.start("tool_error", ALICE))
        assert (
            done.status is TaskStatus.COMPLETED and done.result is not None and done.result["isError"] is True
        )


async def test_a_json_rpc_error_fails_the_task_with_that_error(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        done = await h.settled(await h.start("rpc_error", ALICE))
        assert done.status is TaskStatus.FAILED and done.result is None
        assert done.error == {"code": -32050, "message": "Upstream refused", "data": {"retryable": False}}
        assert done.status_message == "Tool execution failed: Upstream refused"


async def test_an_unexpected_exception_fails_as_internal_error_without_details(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        for tool in ("crash", "bad_result"):
            done = await h.settled(await h.start(tool, ALICE))
            assert done.status is TaskStatus.FAILED and done.error is not None
            assert done.error["code"] == -32603
            assert "secret" not in str(done.error) and "secret" not in str(done.status_message)


async def test_progress_becomes_the_status_message(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("gated", ALICE, {"gate": "g"})
        waiting = await h.wait_for(task, lambda t: t.status_message == "halfway")
        assert waiting.updated_at >= task.updated_at
        h.gates.gate("g").set()
        assert (await h.settled(task)).status_message == "Completed"


async def test_cancellation_stops_the_body_promptly(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("sleepy", ALICE, {"seconds": 60, "label": "long"})
        await h.wait_for(task, lambda t: "long" in h.gates.started)
        started = time.monotonic()
        assert await h.service.cancel(task.task_id, ALICE) is CancelVerdict.REQUESTED
        done = await h.settled(task)
        assert time.monotonic() - started < 1.0
        assert done.status is TaskStatus.CANCELLED and h.gates.cancelled == ["long"]
        assert done.result is None and done.error is None
        # Acknowledged again, and nothing changes.
        assert await h.service.cancel(task.task_id, ALICE) is CancelVerdict.ALREADY_TERMINAL
        assert await h.service.get(task.task_id, ALICE) == done


async def test_a_task_waiting_for_a_slot_can_be_cancelled(tmp_path: Path) -> None:
    settings = FAST.model_copy(update={"max_concurrent": 1})
    async with harness(tmp_path / "db", settings) as h:
        first = await h.start("sleepy", ALICE, {"seconds": 60, "label": "first"})
        queued = await h.start("sleepy", ALICE, {"seconds": 60, "label": "queued"})
        await h.wait_for(first, lambda t: "first" in h.gates.started)
        await h.service.cancel(queued.task_id, ALICE)
        assert (await h.settled(queued)).status is TaskStatus.CANCELLED
        assert "queued" not in h.gates.started
        await h.service.cancel(first.task_id, ALICE)
        await h.settled(first)


async def test_cancel_racing_completion_leaves_exactly_one_terminal_state(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        seen: set[TaskStatus] = set()
        for i in range(25):
            task = await h.start("sleepy", ALICE, {"seconds": random.uniform(0, 0.02), "label": str(i)})
            await anyio.sleep(random.uniform(0, 0.02))
            await h.service.cancel(task.task_id, ALICE)
            final = await h.settled(task)
            seen.add(final.status)
            assert final.status in {TaskStatus.COMPLETED, TaskStatus.CANCELLED}
            assert (final.result is not None) == (final.status is TaskStatus.COMPLETED)
            await anyio.sleep(0.01)
            assert await h.service.get(task.task_id, ALICE) == final
        assert seen  # both outcomes usually occur; either way each task ended exactly once


async def test_input_during_a_task_partial_duplicate_unknown_and_invalid(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("asks", ALICE)
        waiting = await h.wait_for(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        assert set(waiting.input_requests) == {"a", "b"}
        assert waiting.input_requests["a"]["method"] == "elicitation/create"

        outcome = await h.service.update(task.task_id, ALICE, {"a": accept("Ann"), "zzz": accept("ignored")})
        assert outcome.verdict is UpdateVerdict.ACCEPTED and outcome.accepted == ("a",)
        partial = await h.service.get(task.task_id, ALICE)
        assert partial is not None and partial.status is TaskStatus.INPUT_REQUIRED
        assert set(partial.input_requests) == {"b"} and partial.input_responses == {"a": accept("Ann")}

        again = await h.service.update(task.task_id, ALICE, {"a": accept("Changed my mind")})
        assert again.verdict is UpdateVerdict.ACCEPTED and again.accepted == ()
        assert state(await h.service.get(task.task_id, ALICE)) == state(partial)

        invalid = await h.service.update(task.task_id, ALICE, {"b": 12345, "a": accept("x")})
        assert invalid.verdict is UpdateVerdict.INVALID and invalid.invalid_key == "b"
        assert state(await h.service.get(task.task_id, ALICE)) == state(partial)

        assert (await h.service.update(task.task_id, ALICE, {"b": accept("Bea")})).accepted == ("b",)
        done = await h.settled(task)
        assert done.status is TaskStatus.COMPLETED and done.result is not None
        assert done.result["content"][0]["text"] == "Ann & Bea"
        assert done.input_requests == {}
        after = await h.service.update(task.task_id, ALICE, {"b": accept("late")})
        assert after.verdict is UpdateVerdict.ACCEPTED and await h.service.get(task.task_id, ALICE) == done


async def test_answers_gathered_before_the_task_count_as_given(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("asks", ALICE, answers={"a": accept("Pre")})
        waiting = await h.wait_for(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        assert set(waiting.input_requests) == {"b"}
        await h.service.update(task.task_id, ALICE, {"b": accept("Post")})
        done = await h.settled(task)
        assert done.result is not None and done.result["content"][0]["text"] == "Pre & Post"


async def test_a_body_waiting_for_input_lends_its_slot(tmp_path: Path) -> None:
    settings = FAST.model_copy(update={"max_concurrent": 1})
    async with harness(tmp_path / "db", settings) as h:
        asking = await h.start("asks", ALICE)
        await h.wait_for(asking, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        assert (
            await h.settled(await h.start("echo", ALICE, {"text": "meanwhile"}))
        ).status is TaskStatus.COMPLETED
        await h.service.update(asking.task_id, ALICE, {"a": accept("A"), "b": accept("B")})
        assert (await h.settled(asking)).status is TaskStatus.COMPLETED


async def test_cancel_while_waiting_for_input(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("asks", ALICE)
        await h.wait_for(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        await h.service.cancel(task.task_id, ALICE)
        done = await h.settled(task, within=1.0)
        assert done.status is TaskStatus.CANCELLED


async def _crashed_task(h_path: Path, tool: str, who: Owner, **fields: object) -> TaskRecord:
    """A task as a dead runner left it: active, leased to `dead`, lease lapsed."""
    from aml_mcp.store.sqlite import SqliteDatabase
    from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore

    database = SqliteDatabase(h_path)
    database.open()
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        now = int(time.time() * 1000)
        task = record(who, now=now, holder="dead", lease_ms=-1, tool=tool, scope=None, **fields)  # type: ignore[arg-type]
        await SqliteTaskStore(database).create(task)
        return task
    finally:
        database.close()


async def test_recovery_reruns_idempotent_tasks_and_fails_the_others(tmp_path: Path) -> None:
    path = tmp_path / "db"
    rerun = await _crashed_task(path, "sleepy", ALICE, arguments={"seconds": 0, "label": "again"})
    once = await _crashed_task(path, "sleepy_once", ALICE, arguments={"seconds": 0})
    exhausted = await _crashed_task(
        path, "sleepy", ALICE, arguments={"seconds": 0}, attempts=FAST.max_attempts
    )
    cancelled = await _crashed_task(path, "sleepy", ALICE, arguments={"seconds": 0}, cancel_requested=True)
    missing = await _crashed_task(path, "no_such_tool", ALICE)
    waiting = await _crashed_task(
        path,
        "asks",
        ALICE,
        status=TaskStatus.INPUT_REQUIRED,
        input_requests={"a": {"method": "elicitation/create"}},
    )
    async with harness(path) as h:
        done = await h.settled(rerun)
        assert done.status is TaskStatus.COMPLETED and h.gates.started == ["again"] and done.attempts == 2
        failed = await h.settled(once)
        assert failed.status is TaskStatus.FAILED and failed.error is not None
        assert "not safe to run twice" in str(failed.status_message)
        gave_up = await h.settled(exhausted)
        assert gave_up.status is TaskStatus.FAILED and "Gave up" in str(gave_up.status_message)
        assert (await h.settled(cancelled)).status is TaskStatus.CANCELLED
        assert (await h.settled(missing)).status is TaskStatus.FAILED
        assert (await h.settled(waiting)).status is TaskStatus.FAILED


async def test_graceful_stop_hands_leases_back_for_an_immediate_rerun(tmp_path: Path) -> None:
    path = tmp_path / "db"
    slow = TaskSettings(**{**FAST.model_dump(), "lease_ms": 60_000, "heartbeat_ms": 20_000})
    async with harness(path, slow, holder="first") as h:
        task = await h.start("sleepy", ALICE, {"seconds": 0.5, "label": "run"})
        await h.wait_for(task, lambda t: "run" in h.gates.started)
    gates = Gates()
    started = time.monotonic()
    async with harness(path, slow, holder="second", gates=gates) as h:
        done = await h.settled(task)
        assert done.status is TaskStatus.COMPLETED and done.attempts == 2 and gates.started == ["run"]
        assert time.monotonic() - started < 3


async def test_a_runner_that_lost_its_lease_stops_and_writes_nothing(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("sleepy", ALICE, {"seconds": 60, "label": "stolen"})
        await h.wait_for(task, lambda t: "stolen" in h.gates.started)
        await h.database.write(
            lambda c: c.execute(
                "UPDATE tasks SET lease_holder = 'thief', lease_expires_at = ? WHERE task_id = ?",
                (int(time.time() * 1000) + 60_000, task.task_id),
            )
        )
        with anyio.fail_after(2):
            while "stolen" not in h.gates.cancelled:  # noqa: ASYNC110
                await anyio.sleep(0.02)
        await anyio.sleep(0.1)
        current = await h.service.get(task.task_id, ALICE)
        assert (
            current is not None and current.status is TaskStatus.WORKING and current.lease_holder == "thief"
        )
        assert h.runner.active == 0


async def test_a_cancellation_recorded_by_another_process_is_picked_up_by_the_heartbeat(
    tmp_path: Path,
) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("sleepy", ALICE, {"seconds": 60, "label": "elsewhere"})
        await h.wait_for(task, lambda t: "elsewhere" in h.gates.started)
        # Another replica's service records the intent; nobody pokes this runner directly.
        current = await h.service.get(task.task_id, ALICE)
        assert current is not None
        assert await h.store.transition(
            task.task_id,
            ALICE,
            expected_version=current.version,
            change=Change(cancel_requested=True, touch=False),
            now_ms=int(time.time() * 1000),
        )
        done = await h.settled(task, within=2 * FAST.heartbeat_ms / 1000 + 1)
        assert done.status is TaskStatus.CANCELLED and h.gates.cancelled == ["elsewhere"]


async def test_answers_stored_by_another_process_are_found_without_a_wake_up(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        task = await h.start("asks", ALICE)
        waiting = await h.wait_for(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        answering = take_answers(waiting, {"a": accept("A"), "b": accept("B")})
        assert answering.change is not None
        assert await h.store.transition(
            task.task_id,
            ALICE,
            expected_version=waiting.version,
            change=answering.change,
            now_ms=int(time.time() * 1000),
        )
        done = await h.settled(task, within=2 * FAST.heartbeat_ms / 1000 + 1)
        assert done.status is TaskStatus.COMPLETED and done.result is not None
