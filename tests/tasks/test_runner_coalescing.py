"""Identical idempotent tasks of one owner, created while an identical one still waits for its
slot, share that run: forty identical evaluations queued by one analyst cost two runs, not forty."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.principal import Owner
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.settings import TaskSettings
from tests.support.task_faults import Runner, owner_of, principal_of, runner_on

pytestmark = pytest.mark.anyio

DAVE = owner_of("dave", "harbour-trust")
ERIN = owner_of("erin", "harbour-trust")
SETTINGS = TaskSettings(
    poll_interval_ms=50,
    lease_ms=5_000,
    heartbeat_ms=200,
    claim_interval_ms=200,
    max_concurrent=4,
    max_concurrent_per_principal=1,
)


def eval_tools(runs: list[str]) -> ToolRegistry:
    async def evaluate(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        runs.append(ctx.principal.subject)
        await anyio.sleep(0.3)
        return types.CallToolResult(content=[types.TextContent(text=f"figures for {args}")])

    return ToolRegistry(
        [
            ToolSpec(
                name="evaluate",
                description="The same figures every time.",
                input_schema={"type": "object"},
                body=evaluate,
                execution=Execution.TASK,
                idempotent=True,
            )
        ]
    )


async def start(r: Runner, who: Owner, **arguments: Any) -> TaskRecord:
    return await r.start("evaluate", principal_of(who), arguments)


async def settled(r: Runner, task: TaskRecord) -> TaskRecord:
    with anyio.fail_after(15):
        while not (current := await r.row(task)).terminal:  # noqa: ASYNC110
            await anyio.sleep(0.01)
    return current


async def test_forty_identical_tasks_queued_together_cost_two_runs(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        tasks = [await start(r, DAVE, save=False) for _ in range(40)]
        ended = [await settled(r, task) for task in tasks]
    assert runs == ["dave", "dave"]  # the first had started; every later one joined the second
    assert {task.status for task in ended} == {TaskStatus.COMPLETED}
    assert len({str(task.result) for task in ended}) == 1
    assert len({task.task_id for task in ended}) == 40


async def test_other_arguments_or_another_principal_are_never_shared(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        first = await start(r, DAVE, save=False)
        mine = [await start(r, DAVE, save=True), await start(r, DAVE, save=False)]
        colleague = [await start(r, ERIN, save=False), await start(r, ERIN, save=False)]
        for task in [first, *mine, *colleague]:
            assert (await settled(r, task)).status is TaskStatus.COMPLETED
    # dave: the first, the other arguments, and the identical one queued after the first started;
    # erin: her own two, although dave had an identical task waiting
    assert sorted(runs) == ["dave", "dave", "dave", "erin", "erin"]


async def test_a_follower_whose_run_is_cancelled_runs_itself(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        await start(r, DAVE, save=False)  # starts at once
        joined = await start(r, DAVE, save=False)  # queued: later identical ones join it
        follower = await start(r, DAVE, save=False)
        await r.service.cancel(joined.task_id, DAVE)
        assert (await settled(r, joined)).status is TaskStatus.CANCELLED
        done = await settled(r, follower)
    assert done.status is TaskStatus.COMPLETED and runs == ["dave", "dave"]


async def test_coalescing_can_be_switched_off(tmp_path: Path) -> None:
    runs: list[str] = []
    settings = SETTINGS.model_copy(
        update={"coalesce_identical_runs": False, "max_concurrent_per_principal": 4}
    )
    async with runner_on(tmp_path / "db", eval_tools(runs), settings) as r:
        tasks = [await start(r, DAVE, save=False) for _ in range(4)]
        for task in tasks:
            await settled(r, task)
    assert runs == ["dave"] * 4
