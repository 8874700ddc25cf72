"""Storage failures reach callers as one retryable error (-32010, with a hint), never as a bare
internal error, and are logged once per outage; nothing of the refused operation is kept."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from aml_mcp.catalog.invocation import InvocationContext, elicit_form
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.protocol.errors import STORAGE_UNAVAILABLE
from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.settings import TaskSettings
from tests.support.task_faults import (
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
SETTINGS = TaskSettings(poll_interval_ms=50, lease_ms=1_000, heartbeat_ms=100, claim_interval_ms=200)


def tools() -> ToolRegistry:
    async def asks(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answers = await ctx.request_inputs({"who": elicit_form("Who?", NAME)})
        return types.CallToolResult(content=[types.TextContent(text=answers["who"]["content"]["name"])])

    return ToolRegistry(
        [
            ToolSpec(
                name="asks",
                description="Asks who.",
                input_schema={"type": "object"},
                body=asks,
                execution=Execution.TASK,
            )
        ]
    )


def storage_error(caught: pytest.ExceptionInfo[MCPError], cause: str) -> None:
    error = caught.value.error
    assert error.code == STORAGE_UNAVAILABLE, error
    assert cause in error.message and "retry later" in error.message
    assert error.data == {"reason": "storage_unavailable", "retryable": True, "retryAfterMs": 1000}


async def test_a_create_on_a_full_disk_is_a_retryable_error_and_stores_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with runner_on(tmp_path / "db", tools(), SETTINGS) as r:
        big = {"notes": "n" * 200_000}  # needs new pages, which the full disk cannot give
        caplog.set_level(logging.INFO, logger="aml_mcp.tasks")
        async with disk_full(r.database):
            for _ in range(3):
                with pytest.raises(MCPError) as caught:
                    await r.start("asks", principal_of(ALICE), big)
                storage_error(caught, "disk full")
        count = await r.database.read(lambda c: c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
        assert count == 0
        task = await r.start("asks", principal_of(ALICE), big)  # the disk has room again
        assert (await r.row(task)).arguments == big
        messages = [
            record.getMessage() for record in caplog.records if record.name.startswith("aml_mcp.tasks")
        ]
        assert sum("task storage unavailable (disk full" in m for m in messages) == 1, messages
        assert sum("task storage available again" in m for m in messages) == 1, messages


async def test_updates_and_cancels_under_a_lock_are_retryable_errors_and_change_nothing(
    tmp_path: Path,
) -> None:
    async with runner_on(tmp_path / "db", tools(), SETTINGS) as r:
        task = await r.start("asks", principal_of(ALICE))
        with anyio.fail_after(5):
            while (await r.row(task)).status is not TaskStatus.INPUT_REQUIRED:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        before = await r.row(task)
        await short_busy_timeout(r.database, 50)
        with held_write_lock(r.database.path):
            with pytest.raises(MCPError) as caught:
                await r.service.update(
                    task.task_id, ALICE, {"who": {"action": "accept", "content": {"name": "A"}}}
                )
            storage_error(caught, "database busy")
            with pytest.raises(MCPError) as caught:
                await r.service.cancel(task.task_id, ALICE)
            storage_error(caught, "database busy")
            assert (await r.service.get(task.task_id, ALICE)) == before  # reads go on under the lock
        await r.service.cancel(task.task_id, ALICE)
        with anyio.fail_after(5):
            while not (await r.row(task)).terminal:  # noqa: ASYNC110
                await anyio.sleep(0.01)
        assert (await r.row(task)).status is TaskStatus.CANCELLED


async def test_a_closed_database_is_a_retryable_error_for_every_operation(tmp_path: Path) -> None:
    async with runner_on(tmp_path / "db", tools(), SETTINGS) as r:
        task = await r.start("asks", principal_of(ALICE))
        assert await r.service.get(task.task_id, ALICE) is not None  # this thread now has a reader
        r.database.close()
        for operation in (
            lambda: r.service.get(task.task_id, ALICE),
            lambda: r.service.scope_of(task.task_id, ALICE),
            lambda: r.service.cancel(task.task_id, ALICE),
            lambda: r.start("asks", principal_of(ALICE)),
        ):
            with pytest.raises(MCPError) as caught:
                await operation()
            storage_error(caught, "database closed")
