"""Recovery takes over every lapsed task at once, not `max_concurrent` per `claim_interval`.

The finding: after a crash with 1,190 acknowledged tasks, recovery claimed 32 per tick (tasks it
would fail without running included): 43 s until all were terminal at a 1 s interval, about
3 minutes at the default 5 s, with clients polling `working` tasks that were already doomed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.tasks.clock import SystemClock
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.runner import WOKEN_CLAIM_SPACING_SECONDS, TaskRunner
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.support.task_faults import open_database, owner_of, runner_on
from tests.tasks.factories import record

pytestmark = pytest.mark.anyio

OWNERS = [owner_of(f"analyst-{i}", f"bank-{i % 3}") for i in range(6)]
SETTINGS = TaskSettings(
    poll_interval_ms=50,
    lease_ms=5_000,
    heartbeat_ms=500,
    claim_interval_ms=60_000,  # one recovery pass at start-up, then nothing for a minute
    max_concurrent=2,
)


def tools() -> ToolRegistry:
    async def quick(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await anyio.lowlevel.checkpoint()
        return types.CallToolResult(content=[types.TextContent(text="again")])

    def spec(name: str, *, idempotent: bool) -> ToolSpec:
        return ToolSpec(
            name=name,
            description=name,
            input_schema={"type": "object"},
            body=quick,
            execution=Execution.TASK,
            idempotent=idempotent,
        )

    return ToolRegistry([spec("once", idempotent=False), spec("again", idempotent=True)])


async def crashed(path: Path, doomed: int, rerun: int) -> tuple[list[TaskRecord], list[TaskRecord]]:
    """Rows a crashed runner left behind: `working`, their lease lapsed."""
    database = open_database(path)
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        store = SqliteTaskStore(database)
        # A minute ago: every lease (created `i` ms apart, lapsed 1 ms after) has lapsed before the
        # runner starts. Created "now", the last ones lapsed up to half a second later, and a first
        # recovery pass that came sooner left them to the next pass, a minute away.
        now = int(time.time() * 1000) - 60_000
        made: dict[str, list[TaskRecord]] = {"once": [], "again": []}
        for i in range(doomed + rerun):
            tool = "once" if i < doomed else "again"
            task = record(OWNERS[i % len(OWNERS)], now=now + i, holder="crashed", lease_ms=-1, tool=tool)
            await store.create(task)
            made[tool].append(task)
    finally:
        database.close()
    return made["once"], made["again"]


async def test_every_lapsed_task_is_taken_over_in_the_first_recovery_pass(tmp_path: Path) -> None:
    path = tmp_path / "db"
    doomed, rerun = await crashed(path, doomed=400, rerun=100)
    async with runner_on(path, tools(), SETTINGS) as r:
        # The next recovery pass is a minute away: every task ending before then was taken over by
        # the first one. (No timing bound beyond that: a loaded machine only makes the pass slower.)
        with anyio.fail_after(55):
            for task in [*doomed, *rerun]:
                while not (await r.row(task)).terminal:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        for task in doomed:
            ended = await r.row(task)
            assert ended.status is TaskStatus.FAILED and "not safe to run twice" in str(ended.status_message)
        for task in rerun:
            ended = await r.row(task)
            assert ended.status is TaskStatus.COMPLETED and ended.attempts == 2


class CountingClaims(SqliteTaskStore):
    """The SQLite store, counting the claims made of it."""

    claims = 0

    async def claim(self, *args: Any, **kwargs: Any) -> list[TaskRecord]:
        self.claims += 1
        return await super().claim(*args, **kwargs)


async def ended(store: SqliteTaskStore, task: TaskRecord) -> bool:
    found = await store.find(task.task_id, task.owner, int(time.time() * 1000))
    return found is not None and found.terminal


async def test_a_burst_of_wake_ups_is_claimed_at_most_once_per_spacing(tmp_path: Path) -> None:
    """Several API replicas each signal their creates: the worker's claims stay spaced, and a task
    created unleased in the middle of the burst still runs at once."""
    database = open_database(tmp_path / "db")
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        store = CountingClaims(database)
        runner = TaskRunner(store, tools(), SETTINGS, SystemClock())
        async with runner.running():
            await anyio.sleep(0.05)  # the start-up recovery pass
            before, started = store.claims, time.monotonic()
            created: TaskRecord | None = None
            for i in range(100):
                if i == 50:
                    created = record(OWNERS[0], now=int(time.time() * 1000), holder=None, tool="again")
                    await store.create(created)
                runner.wake()
                await anyio.sleep(0.002)
            assert created is not None
            with anyio.fail_after(30):
                while not await ended(store, created):  # noqa: ASYNC110
                    await anyio.sleep(0.005)
            elapsed = time.monotonic() - started
            claims = store.claims - before
    finally:
        database.close()
    assert 1 <= claims <= elapsed / WOKEN_CLAIM_SPACING_SECONDS + 2, (claims, elapsed)
