"""A task service and runner on a real SQLite file, with tools made for testing the lifecycle."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from aml_mcp.catalog.invocation import InvocationContext, elicit_form
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.principal import Owner
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.clock import Clock, SystemClock
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import TaskService
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.support.waiting import eventually_async

NAME = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
ANY_ARGS: dict[str, Any] = {"type": "object"}

FAST = TaskSettings(
    poll_interval_ms=50,
    lease_ms=400,
    heartbeat_ms=100,
    claim_interval_ms=100,
    max_attempts=2,
    sweep_interval_ms=100,
)


def text(value: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=value)], is_error=is_error)


@dataclass
class Gates:
    """Events a test opens to let a body go on, and a record of what bodies saw."""

    release: dict[str, anyio.Event] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)

    def gate(self, name: str) -> anyio.Event:
        return self.release.setdefault(name, anyio.Event())


def lifecycle_tools(gates: Gates) -> ToolRegistry:
    async def echo(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text(str(args.get("text", "")))

    async def sleepy(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        gates.started.append(str(args.get("label", "")))
        try:
            await anyio.sleep(float(args.get("seconds", 0)))
        except anyio.get_cancelled_exc_class():
            gates.cancelled.append(str(args.get("label", "")))
            raise
        return text(f"slept {args.get('label', '')}")

    async def gated(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await ctx.report_progress(1, 2, "halfway")
        await gates.gate(str(args["gate"])).wait()
        return text("opened")

    async def asks(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answers = await ctx.request_inputs(
            {"a": elicit_form("First?", NAME), "b": elicit_form("Second?", NAME)}
        )
        names = [answers[key]["content"]["name"] for key in ("a", "b")]
        return text(" & ".join(names))

    async def rpc_error(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        raise MCPError(code=-32050, message="Upstream refused", data={"retryable": False})

    async def crash(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        raise ValueError("a secret detail that must not reach the client")

    async def tool_error(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return text("bad input", is_error=True)

    async def bad_result(args: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
        return {"content": "not a list"}

    def spec(name: str, body: Any, **kw: Any) -> ToolSpec:
        return ToolSpec(
            name=name, description=name, input_schema=ANY_ARGS, body=body, execution=Execution.TASK, **kw
        )

    return ToolRegistry(
        [
            spec("echo", echo, scope="cases:read"),
            spec("sleepy", sleepy, idempotent=True),
            spec("sleepy_once", sleepy),
            spec("gated", gated),
            spec("asks", asks),
            spec("rpc_error", rpc_error),
            spec("crash", crash),
            spec("tool_error", tool_error),
            spec("bad_result", bad_result),
            spec("short_lived", echo, task_ttl_ms=1_000),
            spec("long_lived", echo, task_ttl_ms=10**12),
        ]
    )


@dataclass
class Harness:
    database: SqliteDatabase
    store: SqliteTaskStore
    runner: TaskRunner
    service: TaskService
    tools: ToolRegistry
    settings: TaskSettings
    gates: Gates

    async def start(
        self, tool: str, who: Owner, arguments: dict[str, Any] | None = None, **kw: Any
    ) -> TaskRecord:
        from tests.tasks.factories import principal_of

        spec = self.tools.get(tool)
        assert spec is not None
        created = await self.service.create(
            spec,
            arguments or {},
            principal=principal_of(who),
            client_capabilities=kw.get("client_capabilities", {"elicitation": {}}),
            answers=kw.get("answers", {}),
            idempotency_key=kw.get("idempotency_key"),
        )
        return created.task

    async def wait_for(
        self, task: TaskRecord, predicate: Callable[[TaskRecord], bool], within: float = 5.0
    ) -> TaskRecord:
        current = await eventually_async(
            lambda: self.service.get(task.task_id, task.owner),
            until=lambda found: found is None or predicate(found),
            within=within,
            what=f"task {task.task_id[:8]} to reach the state awaited",
        )
        assert current is not None
        return current

    async def settled(self, task: TaskRecord, within: float = 5.0) -> TaskRecord:
        return await self.wait_for(task, lambda t: t.terminal, within)


def open_database(path: Path) -> SqliteDatabase:
    database = SqliteDatabase(path)
    database.open()
    return database


@contextlib.asynccontextmanager
async def harness(
    path: Path,
    settings: TaskSettings = FAST,
    *,
    holder: str | None = None,
    gates: Gates | None = None,
    clock: Clock | None = None,
) -> AsyncIterator[Harness]:
    """A running runner on the database at `path` (reopening the same path is a restart), reading
    time from `clock` (default: the system clock)."""
    database = open_database(path)
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        gates = gates or Gates()
        tools = lifecycle_tools(gates)
        store = SqliteTaskStore(database)
        clock = clock or SystemClock()
        runner = TaskRunner(store, tools, settings, clock, holder=holder)
        service = TaskService(store, runner, settings, clock)
        async with runner.running():
            yield Harness(database, store, runner, service, tools, settings, gates)
    finally:
        database.close()
