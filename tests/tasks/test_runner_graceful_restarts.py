"""A graceful stop (SIGTERM, the app's lifespan ending) hands leases back and is not a crash:
it never uses up one of `max_attempts`.

The finding: one `run_full_eval` through graceful restarts was `failed: "Gave up after 3
interrupted attempts"` at the fourth start — three deploys during a long evaluation killed it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.support.mcp_http import create, wait_for
from tests.support.subprocess_server import ServerProcess
from tests.support.task_faults import open_database, owner_of, principal_of, runner_on
from tests.tasks.factories import record

ALICE = owner_of("alice", "bank-a")
SETTINGS = TaskSettings(
    poll_interval_ms=50, lease_ms=60_000, heartbeat_ms=200, claim_interval_ms=200, max_attempts=2
)


def slow_tools(runs: list[float]) -> ToolRegistry:
    async def slow(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        runs.append(time.monotonic())
        await anyio.sleep(float(args["seconds"]))
        return types.CallToolResult(content=[types.TextContent(text=f"run {len(runs)}")])

    return ToolRegistry(
        [
            ToolSpec(
                name="slow",
                description="Takes `seconds`.",
                input_schema={"type": "object"},
                body=slow,
                execution=Execution.TASK,
                idempotent=True,
            )
        ]
    )


async def current(path: Path, task: TaskRecord) -> TaskRecord:
    database = open_database(path)
    try:
        found = await SqliteTaskStore(database).find(task.task_id, task.owner, int(time.time() * 1000))
    finally:
        database.close()
    assert found is not None
    return found


@pytest.mark.anyio
async def test_four_graceful_restarts_do_not_use_up_two_attempts(tmp_path: Path) -> None:
    path = tmp_path / "db"
    runs: list[float] = []
    async with runner_on(path, slow_tools(runs), SETTINGS) as r:
        task = await r.start("slow", principal_of(ALICE), {"seconds": 2})
        with anyio.fail_after(5):
            while not runs:  # noqa: ASYNC110
                await anyio.sleep(0.01)
    for restart in range(2, 5):
        async with runner_on(path, slow_tools(runs), SETTINGS):
            with anyio.fail_after(5):
                while len(runs) < restart:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
    stopped = await current(path, task)
    assert stopped.status is TaskStatus.WORKING and (stopped.attempts, stopped.handovers) == (4, 4)
    async with runner_on(path, slow_tools(runs), SETTINGS) as r:
        with anyio.fail_after(10):
            while not (done := await r.row(task)).terminal:  # noqa: ASYNC110
                await anyio.sleep(0.02)
    assert done.status is TaskStatus.COMPLETED, done.status_message
    assert done.result is not None and done.result["content"][0]["text"] == "run 5"


@pytest.mark.anyio
async def test_a_crash_after_graceful_restarts_still_counts(tmp_path: Path) -> None:
    """Hand-backs are not attempts, crashes are: a task crashed past `max_attempts` is given up."""
    path = tmp_path / "db"
    database = open_database(path)
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        now = int(time.time() * 1000)
        crashed = {"now": now, "holder": "dead", "lease_ms": -1, "tool": "slow", "arguments": {"seconds": 0}}
        survivor = record(ALICE, **crashed, attempts=4, handovers=3)
        exhausted = record(ALICE, **crashed, attempts=4, handovers=1)
        for task in (survivor, exhausted):
            await SqliteTaskStore(database).create(task)
    finally:
        database.close()
    runs: list[float] = []
    async with runner_on(path, slow_tools(runs), SETTINGS) as r:
        with anyio.fail_after(5):
            while not ((await r.row(survivor)).terminal and (await r.row(exhausted)).terminal):  # noqa: ASYNC110
                await anyio.sleep(0.02)
        assert (await r.row(survivor)).status is TaskStatus.COMPLETED  # 5 runs, 3 handed back: 2 count
        gave_up = await r.row(exhausted)  # 5 runs, 1 handed back: 4 count, more than 2
        assert gave_up.status is TaskStatus.FAILED and "Gave up" in str(gave_up.status_message)


@pytest.mark.slow
def test_a_sigterm_restart_of_the_real_server_does_not_count_as_an_attempt(tmp_path: Path) -> None:
    """The real process, stopped by SIGTERM while a task runs, with `max_attempts` = 1: one deploy
    used to be enough to fail the task ("Gave up after 1 interrupted attempts")."""
    env = {"AML_MCP_TASKS__MAX_ATTEMPTS": "1", "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "200"}
    args = ["conformance-server", "--data-dir", str(tmp_path)]
    server = ServerProcess(args, env=env).start()
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            task_id = create(client, "slow_compute", {"seconds": 2, "label": "deployed"})["taskId"]
            time.sleep(0.3)
    finally:
        server.terminate()
        assert server.wait(20) in (0, -15)
    server = ServerProcess(args, env=env).start()  # a new process, on whatever port it binds
    try:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            done = wait_for(client, task_id, "completed", "failed", within=15)
            assert done["status"] == "completed", done.get("statusMessage")
            assert done["result"]["content"][0]["text"] == "deployed"
    finally:
        server.terminate()
        server.wait(20)
