"""A storage failure never strands a task: real SQLite faults under a running runner.

The finding: with the disk full, a body's progress write raised, the runner's attempt to record
`failed` raised too, the job was forgotten — and the heartbeat, renewing every lease of this
runner, kept its lease alive for ever: the task stayed `working` until a restart or its TTL.

The fault used here is a lock held past the writer's busy timeout (`SQLITE_BUSY`, the same code
path); `disk_full` (`SQLITE_FULL`) is used where the write must need new pages.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import psycopg
import pytest

from aml_mcp.aml.notes.model import NotesUnavailableError
from aml_mcp.catalog.invocation import InvocationContext, elicit_form
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.settings import TaskSettings
from tests.support.task_faults import (
    Runner,
    disk_full,
    held_write_lock,
    owner_of,
    principal_of,
    runner_on,
    short_busy_timeout,
)

pytestmark = pytest.mark.anyio

ALICE = owner_of("alice", "bank-a")
NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

SETTINGS = TaskSettings(
    poll_interval_ms=50, lease_ms=1_000, heartbeat_ms=100, claim_interval_ms=200, max_attempts=3
)


class Gates:
    def __init__(self) -> None:
        self.go = anyio.Event()
        self.runs = 0


def fault_tools(gates: Gates) -> ToolRegistry:
    async def ask_after_go(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        gates.runs += 1
        await gates.go.wait()
        answers = await ctx.request_inputs({"who": elicit_form("Who?", NAME)})
        return types.CallToolResult(content=[types.TextContent(text=answers["who"]["content"]["name"])])

    async def progress(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        gates.runs += 1
        steps = int(args["steps"])
        for step in range(steps):
            await ctx.report_progress(step, steps)
            await anyio.sleep(0.05)
        return types.CallToolResult(content=[types.TextContent(text=f"{steps} steps")])

    async def finish_after_go(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        gates.runs += 1
        if gates.runs == 1:
            await gates.go.wait()
        size = int(args.get("result_bytes", 0))
        return types.CallToolResult(
            content=[types.TextContent(text="x" * size if size else f"run {gates.runs}")]
        )

    def spec(name: str, body: Any, *, idempotent: bool) -> ToolSpec:
        return ToolSpec(
            name=name,
            description=name,
            input_schema={"type": "object"},
            body=body,
            execution=Execution.TASK,
            idempotent=idempotent,
        )

    return ToolRegistry(
        [
            spec("ask_once", ask_after_go, idempotent=False),
            spec("ask_again", ask_after_go, idempotent=True),
            spec("progress", progress, idempotent=True),
            spec("finish", finish_after_go, idempotent=True),
        ]
    )


async def until(r: Runner, task: TaskRecord, done: Any, within: float = 10.0) -> TaskRecord:
    with anyio.fail_after(within):
        while True:
            current = await r.row(task)
            if done(current):
                return current
            await anyio.sleep(0.02)


async def test_a_body_killed_by_a_storage_failure_does_not_keep_its_lease(tmp_path: Path) -> None:
    """Not idempotent: once the store works again the task is failed, not left `working`."""
    gates = Gates()
    async with runner_on(tmp_path / "db", fault_tools(gates), SETTINGS) as r:
        task = await r.start("ask_once", principal_of(ALICE))
        await until(r, task, lambda _: gates.runs == 1)
        await short_busy_timeout(r.database, 50)
        with held_write_lock(r.database.path):
            gates.go.set()  # the body's write of `input_required` fails: the body dies
            await anyio.sleep(3 * SETTINGS.lease_ms / 1000)  # long enough for a lease to lapse
        ended = await until(r, task, lambda t: t.terminal, within=5)
        assert ended.status is TaskStatus.FAILED
        assert "storage failure" in str(ended.status_message)
        assert r.runner.active == 0


async def test_an_idempotent_body_killed_by_a_storage_failure_runs_again_in_place(tmp_path: Path) -> None:
    """A fault shorter than a lease costs no attempt: the body runs again here, lease still held."""
    gates = Gates()
    async with runner_on(tmp_path / "db", fault_tools(gates), SETTINGS) as r:
        task = await r.start("ask_again", principal_of(ALICE))
        await until(r, task, lambda _: gates.runs == 1)
        await short_busy_timeout(r.database, 50)
        with held_write_lock(r.database.path):
            gates.go.set()
            await anyio.sleep(0.5)
        asking = await until(r, task, lambda t: t.status is TaskStatus.INPUT_REQUIRED, within=5)
        assert gates.runs >= 2 and asking.attempts == 1
        await r.service.update(task.task_id, ALICE, {"who": {"action": "accept", "content": {"name": "Ann"}}})
        done = await until(r, task, lambda t: t.terminal)
        assert done.status is TaskStatus.COMPLETED and done.result is not None


async def test_progress_that_cannot_be_written_is_skipped_and_the_body_goes_on(tmp_path: Path) -> None:
    gates = Gates()
    async with runner_on(tmp_path / "db", fault_tools(gates), SETTINGS) as r:
        task = await r.start("progress", principal_of(ALICE), {"steps": 30})
        await until(r, task, lambda t: t.status_message is not None)
        await short_busy_timeout(r.database, 20)
        with held_write_lock(r.database.path):
            await anyio.sleep(0.4)  # several progress writes and a heartbeat fail meanwhile
        done = await until(r, task, lambda t: t.terminal)
        assert done.status is TaskStatus.COMPLETED and done.attempts == 1 and gates.runs == 1
        assert done.result is not None and done.result["content"][0]["text"] == "30 steps"


async def test_an_outcome_that_cannot_be_written_is_retried_until_the_store_recovers(tmp_path: Path) -> None:
    gates = Gates()
    async with runner_on(tmp_path / "db", fault_tools(gates), SETTINGS) as r:
        task = await r.start("finish", principal_of(ALICE))
        await until(r, task, lambda _: gates.runs == 1)
        await short_busy_timeout(r.database, 20)
        with held_write_lock(r.database.path):
            gates.go.set()  # the body returns; recording `completed` fails for a while
            await anyio.sleep(0.4)
        done = await until(r, task, lambda t: t.terminal, within=5)
        assert done.status is TaskStatus.COMPLETED and done.attempts == 1
        assert done.result is not None and done.result["content"][0]["text"] == "run 1"


async def test_an_outcome_unwritable_while_heartbeats_succeed_is_handed_back_and_run_again(
    tmp_path: Path,
) -> None:
    """The measured case: a full disk refuses the big result, while the heartbeat (an update in
    place) still succeeds. Renewing every lease of the runner kept this task `working` for ever."""
    gates = Gates()
    settings = SETTINGS.model_copy(update={"max_attempts": 20})
    async with runner_on(tmp_path / "db", fault_tools(gates), settings) as r:
        task = await r.start("finish", principal_of(ALICE), {"result_bytes": 200_000})
        await until(r, task, lambda _: gates.runs == 1)
        async with disk_full(r.database):
            gates.go.set()  # the body returns 200 kB: recording it needs pages the disk does not have
            await anyio.sleep(1.5 * SETTINGS.lease_ms / 1000)
            assert (await r.row(task)).status is TaskStatus.WORKING
        started = time.monotonic()
        done = await until(r, task, lambda t: t.terminal, within=5)
        assert done.status is TaskStatus.COMPLETED and done.attempts >= 2
        assert done.result is not None and len(done.result["content"][0]["text"]) == 200_000
        assert time.monotonic() - started < 3


def flaky_tools(faults: list[BaseException], runs: list[int]) -> ToolRegistry:
    """`draft`: raises the next of `faults` on each run while any is left, then completes."""

    async def draft(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        runs.append(1)
        if faults:
            raise faults.pop(0)
        return types.CallToolResult(content=[types.TextContent(text=f"run {len(runs)}")])

    return ToolRegistry(
        [
            ToolSpec(
                name="draft",
                description="draft",
                input_schema={"type": "object"},
                body=draft,
                execution=Execution.TASK,
                idempotent=True,
            )
        ]
    )


def notes_outage() -> NotesUnavailableError:
    """What the PostgreSQL notes store raises when its connection was terminated."""
    try:
        raise NotesUnavailableError("database unreachable") from psycopg.errors.AdminShutdown(
            "terminating connection due to administrator command"
        )
    except NotesUnavailableError as exc:
        return exc


def locked_database() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("database is locked")
    error.sqlite_errorname = "SQLITE_BUSY"  # type: ignore[attr-defined]
    return error


async def test_a_notes_outage_or_a_locked_file_under_a_body_runs_it_again_and_it_completes(
    tmp_path: Path,
) -> None:
    """The review's D1: the notes store's outage error (and a driver error raised inside a tool's own
    exception) was taken for a bug and failed the task with "Internal error"."""
    runs: list[int] = []
    faults: list[BaseException] = [notes_outage(), locked_database(), RuntimeError("draft failed")]
    faults[2].__cause__ = locked_database()
    async with runner_on(tmp_path / "db", flaky_tools(faults, runs), SETTINGS) as r:
        task = await r.start("draft", principal_of(ALICE))
        done = await until(r, task, lambda t: t.terminal)
    assert done.status is TaskStatus.COMPLETED, done.status_message
    assert done.attempts == 1 and len(runs) == 4
    assert done.result is not None and done.result["content"][0]["text"] == "run 4"


async def test_a_fault_that_outlasts_a_lease_hands_the_task_back_to_be_run_again(tmp_path: Path) -> None:
    runs: list[int] = []
    settings = SETTINGS.model_copy(update={"lease_ms": 300, "max_attempts": 10})
    faults: list[BaseException] = [notes_outage() for _ in range(8)]
    async with runner_on(tmp_path / "db", flaky_tools(faults, runs), settings) as r:
        task = await r.start("draft", principal_of(ALICE))
        done = await until(r, task, lambda t: t.terminal)
    assert done.status is TaskStatus.COMPLETED, done.status_message
    assert done.attempts >= 2 and len(runs) == 9  # handed back, claimed again, and run to the end


async def test_a_bug_in_the_tool_still_fails_the_task_at_once(tmp_path: Path) -> None:
    runs: list[int] = []
    async with runner_on(tmp_path / "db", flaky_tools([ValueError("a bug")], runs), SETTINGS) as r:
        task = await r.start("draft", principal_of(ALICE))
        failed = await until(r, task, lambda t: t.terminal)
    assert failed.status is TaskStatus.FAILED and failed.error is not None
    assert failed.error["message"] == "Internal error" and len(runs) == 1
