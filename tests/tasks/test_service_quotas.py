"""Caps on unfinished tasks per principal and per tenant, and on a principal's creates within a
window: a refused create is a clear, retryable JSON-RPC error with a hint, stores nothing, is
audited, and concurrent creates never overshoot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from aml_mcp.app import build_app
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.principal import Owner
from aml_mcp.protocol.errors import TOO_MANY_TASKS
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.model import TaskRecord, TaskStatus
from aml_mcp.tasks.settings import TaskSettings
from tests.support.clocks import OffsetClock
from tests.support.live_server import LiveServer
from tests.support.mcp_http import call_tool, cancel, create, wait_for
from tests.support.oauth import audit_mark, wait_for_audit
from tests.support.task_faults import Runner, owner_of, principal_of, runner_on
from tests.tasks.harness import FAST, harness

ALICE = owner_of("alice", "bank-a")
BOB = owner_of("bob", "bank-a")
ALICE_OTHER_CLIENT = owner_of("alice", "bank-a", client_id="client-2")
CAROL = owner_of("carol", "bank-b")

SETTINGS = TaskSettings(
    poll_interval_ms=50,
    lease_ms=2_000,
    heartbeat_ms=200,
    claim_interval_ms=200,
    max_active_per_principal=3,
    max_active_per_tenant=5,
)


def waiting_tools() -> ToolRegistry:
    async def wait(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await anyio.sleep(60)
        return types.CallToolResult(content=[types.TextContent(text="done")])

    return ToolRegistry(
        [
            ToolSpec(
                name="wait",
                description="Waits a minute.",
                input_schema={"type": "object"},
                body=wait,
                execution=Execution.TASK,
            )
        ]
    )


async def start(r: Runner, who: Owner) -> TaskRecord:
    return await r.start("wait", principal_of(who))


async def refused(r: Runner, who: Owner) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await start(r, who)
    return caught.value


async def settled(r: Runner, task: TaskRecord) -> TaskRecord:
    with anyio.fail_after(5):
        while True:
            current = await r.service.get(task.task_id, task.owner)
            if current is not None and current.terminal:
                return current
            await anyio.sleep(0.01)


async def rows(r: Runner) -> int:
    return await rows_of(r.database)


async def rows_of(database: SqliteDatabase) -> int:
    count = await database.read(lambda conn: conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    return int(count)


@pytest.mark.anyio
async def test_creates_beyond_the_principal_and_tenant_caps_are_refused_retryably(tmp_path: Path) -> None:
    async with runner_on(tmp_path / "db", waiting_tools(), SETTINGS) as r:
        mine = [await start(r, ALICE) for _ in range(2)]
        await start(r, ALICE_OTHER_CLIENT)  # the same analyst through another client: same principal
        error = (await refused(r, ALICE)).error
        assert error.code == TOO_MANY_TASKS
        assert "you" in error.message and "at most 3" in error.message and "tasks/cancel" in error.message
        assert error.data == {"reason": "too_many_tasks", "retryable": True, "retryAfterMs": 50}
        assert await rows(r) == 3  # the refused create stored nothing

        await start(r, BOB)
        await start(r, BOB)  # bank-a now has 5 unfinished tasks
        error = (await refused(r, BOB)).error
        assert error.code == TOO_MANY_TASKS and "your institution" in error.message
        await start(r, CAROL)  # another bank is not affected

        await r.service.cancel(mine[0].task_id, ALICE)
        assert (await settled(r, mine[0])).status is TaskStatus.CANCELLED
        await start(r, ALICE)  # room again: retrying now succeeds


@pytest.mark.anyio
async def test_concurrent_creates_never_overshoot_the_cap(tmp_path: Path) -> None:
    settings = SETTINGS.model_copy(update={"max_active_per_principal": 5, "max_active_per_tenant": 100})
    async with runner_on(tmp_path / "db", waiting_tools(), settings) as r:
        outcomes: list[str] = []

        async def one() -> None:
            try:
                await start(r, ALICE)
                outcomes.append("created")
            except MCPError as exc:
                outcomes.append("refused" if exc.error.code == TOO_MANY_TASKS else repr(exc))

        async with anyio.create_task_group() as group:
            for _ in range(20):
                group.start_soon(one)
        assert sorted(outcomes) == ["created"] * 5 + ["refused"] * 15
        assert await rows(r) == 5


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("tasks-quota"),
        auth=AuthSettings(enabled=False),
        tasks=TaskSettings(poll_interval_ms=250, max_active_per_principal=2),
    )
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


def test_a_refused_create_over_http_is_a_retryable_json_rpc_error_and_audited(server: LiveServer) -> None:
    data_dir = server.app.state.settings.data_dir  # type: ignore[attr-defined]
    with httpx.Client(base_url=server.url, timeout=10) as client:
        first = create(client, "slow_compute", {"seconds": 30})["taskId"]
        create(client, "slow_compute", {"seconds": 30})
        mark = audit_mark(data_dir)
        response = call_tool(client, "slow_compute", {"seconds": 30})
        assert response.status_code == 200, response.text
        body = response.json()
        assert "result" not in body
        assert body["error"]["code"] == TOO_MANY_TASKS
        assert body["error"]["data"]["retryable"] is True and body["error"]["data"]["retryAfterMs"] == 250
        assert "cancel one with tasks/cancel, then retry" in body["error"]["message"]
        wait_for_audit(data_dir, since=mark, method="tools/call", decision="deny", reason="too_many_tasks")

        assert cancel(client, first).status_code == 200
        wait_for(client, first, "cancelled")
        assert create(client, "slow_compute", {"seconds": 0})["status"] == "working"


@pytest.mark.anyio
async def test_creates_beyond_the_window_are_refused_though_every_task_finished(tmp_path: Path) -> None:
    settings = FAST.model_copy(update={"max_created_per_principal_per_window": 3, "create_window_seconds": 2})
    clock = OffsetClock()
    async with harness(tmp_path / "db", settings, clock=clock) as h:
        done = [await h.settled(await h.start("echo", ALICE, {"text": str(i)})) for i in range(3)]
        assert all(task.status is TaskStatus.COMPLETED for task in done)  # nothing unfinished
        with pytest.raises(MCPError) as caught:
            await h.start("echo", ALICE_OTHER_CLIENT, {"text": "4"})  # same principal, other client
        error = caught.value.error
        assert error.code == TOO_MANY_TASKS
        assert "at most 3 in 2 s" in error.message and "finished ones included" in error.message
        hint = error.data
        assert hint["reason"] == "too_many_tasks" and hint["retryable"] is True
        assert 0 < hint["retryAfterMs"] <= 2000
        assert await rows_of(h.database) == 3  # the refused create stored nothing
        await h.start("echo", BOB, {"text": "x"})  # a colleague at the same bank is not affected

        clock.advance(hint["retryAfterMs"])  # as the hint says: the oldest create left the window
        await h.start("echo", ALICE, {"text": "5"})
