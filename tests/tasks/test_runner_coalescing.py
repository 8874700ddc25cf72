"""Identical idempotent tasks of one owner, created while an identical one is queued or running,
take that run's result: forty identical evaluations created by one analyst cost one run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext, elicit_form
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
        if args.get("ask"):
            await ctx.request_inputs({"go": elicit_form("Go on?", {"type": "object", "properties": {}})})
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


async def test_forty_identical_tasks_cost_one_run(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        tasks = [await start(r, DAVE, save=False) for _ in range(40)]
        ended = [await settled(r, task) for task in tasks]
    assert runs == ["dave"]
    assert {task.status for task in ended} == {TaskStatus.COMPLETED}
    assert len({str(task.result) for task in ended}) == 1
    assert len({task.task_id for task in ended}) == 40


async def test_other_arguments_or_another_principal_are_never_shared(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        mine = [
            await start(r, DAVE, save=False),
            await start(r, DAVE, save=True),
            await start(r, DAVE, save=False),
        ]
        colleague = [await start(r, ERIN, save=False), await start(r, ERIN, save=False)]
        for task in [*mine, *colleague]:
            assert (await settled(r, task)).status is TaskStatus.COMPLETED
    assert sorted(runs) == ["dave", "dave", "erin"]  # erin's tasks never take dave's result


async def test_when_the_shared_run_is_cancelled_a_follower_runs_itself(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        leader = await start(r, DAVE, save=False)
        followers = [await start(r, DAVE, save=False) for _ in range(3)]
        await r.service.cancel(leader.task_id, DAVE)
        assert (await settled(r, leader)).status is TaskStatus.CANCELLED
        done = [await settled(r, task) for task in followers]
    assert {task.status for task in done} == {TaskStatus.COMPLETED}
    assert runs == ["dave", "dave"]  # one follower took over the run, the others followed it


async def test_followers_of_a_run_that_asks_for_input_are_not_kept_waiting(tmp_path: Path) -> None:
    runs: list[str] = []
    async with runner_on(tmp_path / "db", eval_tools(runs), SETTINGS) as r:
        tasks = [await start(r, DAVE, ask=True) for _ in range(3)]
        with anyio.fail_after(5):
            for task in tasks:
                while (await r.row(task)).status is not TaskStatus.INPUT_REQUIRED:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        for task in tasks:
            await r.service.cancel(task.task_id, DAVE)


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
