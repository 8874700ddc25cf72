"""Fair shares of the runner's slots, with real tasks whose bodies take a known time.

The finding: one bank's 40 `run_full_eval` tasks held every slot of one global FIFO queue, and
another bank's one-case draft stayed `working` for 80 s instead of 0.2 s. Here one tenant queues
40 tasks of 1 s each on 4 slots; another tenant's (and a colleague's) short task must be done
within twice its own run time, not after the queue.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.principal import Owner
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.scheduler import FairScheduler, Share
from aml_mcp.tasks.settings import TaskSettings
from tests.support.task_faults import Runner, owner_of, principal_of, runner_on

pytestmark = pytest.mark.anyio

DAVE = owner_of("dave", "harbour-trust")
ERIN = owner_of("erin", "harbour-trust")
ALICE = owner_of("alice", "meridian-bank")

SETTINGS = TaskSettings(
    poll_interval_ms=50,
    lease_ms=2_000,
    heartbeat_ms=200,
    claim_interval_ms=200,
    max_concurrent=4,
    max_concurrent_per_tenant=3,
    max_concurrent_per_principal=2,
)


def timed_tools(started: list[str]) -> ToolRegistry:
    async def work(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        started.append(str(args["label"]))
        await anyio.sleep(float(args["seconds"]))
        return types.CallToolResult(content=[types.TextContent(text=str(args["label"]))])

    return ToolRegistry(
        [
            ToolSpec(
                name="work",
                description="Takes `seconds`.",
                input_schema={"type": "object"},
                body=work,
                execution=Execution.TASK,
                idempotent=True,
            )
        ]
    )


async def create(r: Runner, who: Owner, label: str, seconds: float) -> TaskRecord:
    return await r.start("work", principal_of(who), {"label": label, "seconds": seconds})


async def completed_after(r: Runner, task: TaskRecord, within: float) -> float:
    """Seconds from now until `task` is completed (fails if that takes longer than `within`)."""
    begun = time.monotonic()
    with anyio.fail_after(within):
        while True:
            current = await r.service.get(task.task_id, task.owner)
            assert current is not None
            if current.terminal:
                assert current.status is TaskStatus.COMPLETED
                return time.monotonic() - begun
            await anyio.sleep(0.01)


async def test_another_banks_short_task_is_not_queued_behind_forty_long_ones(tmp_path: Path) -> None:
    started: list[str] = []
    async with runner_on(tmp_path / "db", timed_tools(started), SETTINGS) as r:
        for i in range(40):
            await create(r, DAVE, f"dave-{i}", 1.0)
        with anyio.fail_after(5):
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        own_run_time = 0.5
        short = await create(r, ALICE, "alice", own_run_time)
        waited = await completed_after(r, short, within=15)
        assert waited < 2 * own_run_time, f"alice's task took {waited:.2f} s"
        assert r.runner.scheduler.running_for(Share.of(DAVE)) == (2, 2)


async def test_a_colleagues_task_is_not_queued_behind_one_analysts_queue(tmp_path: Path) -> None:
    started: list[str] = []
    async with runner_on(tmp_path / "db", timed_tools(started), SETTINGS) as r:
        for i in range(40):
            await create(r, DAVE, f"dave-{i}", 1.0)
        with anyio.fail_after(5):
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        own_run_time = 0.5
        colleague = await create(r, ERIN, "erin", own_run_time)
        waited = await completed_after(r, colleague, within=15)
        assert waited < 2 * own_run_time, f"erin's task took {waited:.2f} s"


async def test_when_slots_are_short_a_freed_slot_goes_to_the_tenant_running_fewest(tmp_path: Path) -> None:
    started: list[str] = []
    settings = SETTINGS.model_copy(
        update={"max_concurrent": 2, "max_concurrent_per_tenant": 2, "max_concurrent_per_principal": 2}
    )
    async with runner_on(tmp_path / "db", timed_tools(started), settings) as r:
        dave = [await create(r, DAVE, f"dave-{i}", 0.3) for i in range(10)]
        with anyio.fail_after(5):
            while len(started) < 2:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        alice = [await create(r, ALICE, f"alice-{i}", 0.3) for i in range(3)]
        for task in alice:
            await completed_after(r, task, within=15)
        # Slots alternate between the banks: alice's three start among the first seven, not after
        # dave's ten as in one FIFO queue.
        assert {f"alice-{i}" for i in range(3)} <= set(started[:7]), started
        for task in dave:
            await completed_after(r, task, within=15)


async def test_a_single_tenant_never_takes_more_than_its_share(tmp_path: Path) -> None:
    started: list[str] = []
    async with runner_on(tmp_path / "db", timed_tools(started), SETTINGS) as r:
        for i in range(6):
            await create(r, DAVE, f"dave-{i}", 0.3)
            await create(r, ERIN, f"erin-{i}", 0.3)
        peak = (0, 0)
        with anyio.fail_after(10):
            while len(started) < 12 or r.runner.scheduler.running:
                tenant, _ = r.runner.scheduler.running_for(Share.of(DAVE))
                peak = (max(peak[0], tenant), max(peak[1], r.runner.scheduler.running))
                await anyio.sleep(0.005)
        assert peak == (3, 3)  # 4 slots, but the tenant's share is 3 while its queue is long


async def test_cancelled_waiters_hold_nothing_and_a_grant_racing_cancellation_is_given_back() -> None:
    scheduler = FairScheduler(1, per_tenant=1, per_principal=1)
    share = Share.of(DAVE)
    await scheduler.acquire(share)
    with anyio.move_on_after(0.05):
        await scheduler.acquire(share)
    assert (scheduler.running, scheduler.waiting) == (1, 0)

    async def use_a_slot() -> None:
        await scheduler.acquire(Share.of(ALICE))
        try:
            await anyio.sleep_forever()
        finally:
            scheduler.release(Share.of(ALICE))

    async with anyio.create_task_group() as group:
        group.start_soon(use_a_slot)
        await anyio.sleep(0.01)
        assert scheduler.waiting == 1
        scheduler.release(share)  # granted to alice's waiter ...
        group.cancel_scope.cancel()  # ... which is cancelled before it resumes
    assert (scheduler.running, scheduler.waiting) == (0, 0)
    await scheduler.acquire(share)
    assert scheduler.running_for(share) == (1, 1)
