"""Progress on tasks, at the runner: throttled and coalesced writes, the latest report kept with the
outcome, nothing written while a task waits for input, messages treated as data, and every write
published to the event bus (the single-process bus; PostgreSQL's NOTIFY is tested beside its bus).

The store is counted: a body that reports progress a thousand times costs at most one write per
`tasks.progress_interval_ms` (plus the outcome), counted both as the store's progress writes and as
the task row's version increments.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp.catalog.invocation import InvocationContext, elicit_form
from aml_mcp.catalog.tools import Execution, ToolRegistry, ToolSpec
from aml_mcp.principal import Owner
from aml_mcp.subscriptions.bus import LocalEventBus
from aml_mcp.subscriptions.events import Event, TaskChanged
from aml_mcp.tasks.clock import SystemClock
from aml_mcp.tasks.inputs import WAITING_MESSAGE
from aml_mcp.tasks.model import PROGRESS_META_KEY, Progress, TaskRecord, TaskStatus
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import TaskService
from aml_mcp.tasks.storage import Change, TaskQuota, TaskStore
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from aml_mcp.tasks.streams import PublishingTaskStore
from aml_mcp.tasks.task_context import MAX_STATUS_MESSAGE_CHARS, ProgressReport, ProgressThrottle
from tests.support.waiting import eventually_async
from tests.tasks.factories import owner, principal_of
from tests.tasks.harness import FAST, NAME, open_database, text

pytestmark = pytest.mark.anyio

INTERVAL_MS = 100
SETTINGS = FAST.model_copy(update={"progress_interval_ms": INTERVAL_MS})


class CountingStore:
    """A `TaskStore` that counts, per task, the progress writes sent (a change carrying a status
    message or structured progress, and no new status) and those it saw commit. A write still in
    flight when its body ends is cancelled on the caller's side and may commit all the same: it is
    sent, not seen."""

    def __init__(self, inner: TaskStore) -> None:
        self._inner = inner
        self.progress_writes: dict[str, int] = {}
        self.progress_sent: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        return await self._inner.create(task, quota, idempotency_key=idempotency_key)

    async def transition(self, task_id: str, owner: Owner, *, change: Change, **kw: Any) -> TaskRecord | None:
        progress = change.status is None and (
            change.status_message is not None or change.progress is not None
        )
        if progress:
            self.progress_sent[task_id] = self.progress_sent.get(task_id, 0) + 1
        updated = await self._inner.transition(task_id, owner, change=change, **kw)
        if updated is not None and progress:
            self.progress_writes[task_id] = self.progress_writes.get(task_id, 0) + 1
        return updated

    async def claim(
        self, holder: str, now_ms: int, lease_until_ms: int, limit: int, exclude: Collection[str] = ()
    ) -> list[TaskRecord]:
        return await self._inner.claim(holder, now_ms, lease_until_ms, limit, exclude)


@dataclass
class Seen:
    """What the bodies saw: when each reported its first and last progress."""

    spans: dict[str, tuple[float, float]] = field(default_factory=dict)
    asked: anyio.Event = field(default_factory=anyio.Event)


def _tools(seen: Seen) -> ToolRegistry:
    async def chatty(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        """Reports `count` steps, `pause` seconds apart every tenth (0: all at once)."""
        count, pause = int(args["count"]), float(args.get("pause", 0))
        started = time.monotonic()
        for step in range(1, count + 1):
            await ctx.report_progress(step, count, f"step {step} of {count}")
            if pause and step % 10 == 0:
                await anyio.sleep(pause)
        seen.spans[str(args["label"])] = (started, time.monotonic())
        return text("done")

    async def asks(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await ctx.report_progress(1, 4, "reading")
        await anyio.sleep(3 * INTERVAL_MS / 1000)
        await ctx.report_progress(2, 4, "read")  # written at once: the interval has passed
        await ctx.report_progress(3, 4, "asking the analyst")  # waits its turn, then the question comes
        answers = await ctx.request_inputs({"a": elicit_form("Name?", NAME)})
        await ctx.report_progress(4, 4, "answered")
        return text(answers["a"]["content"]["name"])

    async def shouty(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await ctx.report_progress(1, 2, str(args["message"]) + "\ud800")  # (no argument may hold one)
        await anyio.sleep(3 * INTERVAL_MS / 1000)
        return text("said")

    async def odd(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        await ctx.report_progress(float("nan"), float("inf"))
        await ctx.report_progress(True, -1, "booleans are no counts")  # type: ignore[arg-type]
        await anyio.sleep(3 * INTERVAL_MS / 1000)
        return text("odd")

    def spec(name: str, body: Any) -> ToolSpec:
        return ToolSpec(
            name=name, description=name, input_schema={"type": "object"}, body=body, execution=Execution.TASK
        )

    return ToolRegistry(
        [spec("chatty", chatty), spec("asks", asks), spec("shouty", shouty), spec("odd", odd)]
    )


@dataclass
class Rig:
    store: CountingStore
    service: TaskService
    tools: ToolRegistry
    seen: Seen
    events: list[TaskChanged]

    async def start(self, tool: str, arguments: dict[str, Any], who: Owner | None = None) -> TaskRecord:
        spec = self.tools.get(tool)
        assert spec is not None
        created = await self.service.create(
            spec,
            arguments,
            principal=principal_of(who or owner()),
            client_capabilities={"elicitation": {}},
            answers={},
        )
        return created.task

    async def settled(self, task: TaskRecord, within: float = 10.0) -> TaskRecord:
        return await self.until(task, lambda t: t.terminal, within)

    async def until(self, task: TaskRecord, predicate: Any, within: float = 10.0) -> TaskRecord:
        found = await eventually_async(
            lambda: self.service.get(task.task_id, task.owner),
            until=lambda t: t is not None and predicate(t),
            within=within,
            what=f"task {task.task_id[:8]}",
        )
        assert found is not None
        return found


@contextlib.asynccontextmanager
async def rig(path: Path) -> AsyncIterator[Rig]:
    database = open_database(path)
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        seen = Seen()
        tools = _tools(seen)
        bus = LocalEventBus()
        events: list[TaskChanged] = []

        def heard(event: Event) -> None:
            if isinstance(event, TaskChanged):
                events.append(event)

        bus.subscribe(heard)
        clock = SystemClock()
        counting = CountingStore(SqliteTaskStore(database))
        store = PublishingTaskStore(counting, bus, clock, SETTINGS.poll_interval_ms)  # type: ignore[arg-type]
        runner = TaskRunner(store, tools, SETTINGS, clock)
        service = TaskService(store, runner, SETTINGS, clock)
        async with runner.running():
            yield Rig(counting, service, tools, seen, events)
    finally:
        database.close()


def _allowed(span: tuple[float, float]) -> int:
    """Writes a throttle of `INTERVAL_MS` allows over `span`: the first at once, then one per interval."""
    return 1 + math.ceil((span[1] - span[0]) / (INTERVAL_MS / 1000))


async def test_a_thousand_reports_cost_at_most_one_write_per_interval(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        task = await r.start("chatty", {"label": "steady", "count": 1000, "pause": 0.01})
        done = await r.settled(task)
        writes = r.store.progress_writes.get(task.task_id, 0)
        sent = r.store.progress_sent.get(task.task_id, 0)
        allowed = _allowed(r.seen.spans["steady"])
        assert 2 <= writes <= sent <= allowed, (writes, sent, allowed)
        # The row's version moved once per progress write and once for the outcome: nothing else wrote.
        assert writes <= done.version - 2 <= sent
        # The latest report won, and the one still waiting when the body ended came with the outcome.
        assert done.status is TaskStatus.COMPLETED and done.progress == Progress(1000, 1000)
        assert done.status_message == "Completed"
        written = [e for e in r.events if e.task_id == task.task_id and e.state["status"] == "working"]
        assert len(written) == writes, "every progress write was published, and nothing else while working"
        shown = [e.state["_meta"][PROGRESS_META_KEY]["done"] for e in written]
        assert shown == sorted(shown) and len(set(shown)) == len(shown)
        assert all(
            e.state["statusMessage"] == f"step {d} of 1000" for e, d in zip(written, shown, strict=True)
        )


async def test_a_burst_in_one_go_is_one_write_and_the_outcome(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        task = await r.start("chatty", {"label": "burst", "count": 1000})
        done = await r.settled(task)
        assert r.store.progress_sent.get(task.task_id, 0) <= 1
        assert done.progress == Progress(1000, 1000) and done.version <= 3


async def test_several_tasks_are_each_throttled_on_their_own(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        tasks = [
            await r.start("chatty", {"label": f"t{n}", "count": 400, "pause": 0.01}, owner(subject=f"s{n}"))
            for n in range(4)
        ]
        for n, task in enumerate(tasks):
            await r.settled(task)
            writes = r.store.progress_sent.get(task.task_id, 0)
            assert 1 <= writes <= _allowed(r.seen.spans[f"t{n}"])


async def test_progress_is_not_written_while_the_task_waits_for_input(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        task = await r.start("asks", {})
        waiting = await r.until(task, lambda t: t.status is TaskStatus.INPUT_REQUIRED)
        await anyio.sleep(3 * INTERVAL_MS / 1000)
        still = await r.service.get(task.task_id, task.owner)
        assert still is not None and still.status is TaskStatus.INPUT_REQUIRED
        assert still.status_message == WAITING_MESSAGE and still.version == waiting.version
        assert still.progress == Progress(2, 4), "the report left when the question came was dropped"
        await r.service.update(
            task.task_id, task.owner, {"a": {"action": "accept", "content": {"name": "Ada"}}}
        )
        done = await r.settled(task)
        assert done.status is TaskStatus.COMPLETED and done.progress == Progress(4, 4)
        statuses = [e.state["status"] for e in r.events if e.task_id == task.task_id]
        flips = [s for n, s in enumerate(statuses) if n == 0 or statuses[n - 1] != s]
        assert flips == ["working", "input_required", "working", "completed"], statuses


async def test_progress_messages_are_one_bounded_line(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        message = "line one\nline two\u2028\x85\x1b[31m" + "x" * 5000
        task = await r.start("shouty", {"message": message})
        shown = await r.until(task, lambda t: t.status_message not in (None,))
        assert shown.status_message is not None
        assert len(shown.status_message) <= MAX_STATUS_MESSAGE_CHARS
        assert shown.status_message.startswith("line one line two   [31mxxx")
        assert not any(ch in shown.status_message for ch in "\n\u2028\x85\x1b")
        await r.settled(task)


async def test_numbers_that_are_not_counts_are_not_progress(tmp_path: Path) -> None:
    async with rig(tmp_path / "tasks.db") as r:
        task = await r.start("odd", {})
        done = await r.settled(task)
        assert done.progress is None and done.status is TaskStatus.COMPLETED
        said = [e.state.get("statusMessage") for e in r.events if e.task_id == task.task_id]
        assert "booleans are no counts" in said or "" not in said


async def test_the_throttle_writes_the_first_at_once_and_only_the_latest_after() -> None:
    written: list[tuple[float, str]] = []
    started = anyio.current_time()

    async def write(report: ProgressReport) -> None:
        written.append((anyio.current_time() - started, report.message))

    throttle = ProgressThrottle(0.2, write)
    async with anyio.create_task_group() as group:
        group.start_soon(throttle.run)
        throttle.report(ProgressReport("first", None))
        await anyio.sleep(0.02)
        for n in range(50):
            throttle.report(ProgressReport(f"then {n}", None))
        await anyio.sleep(0.3)
        throttle.report(ProgressReport("last", None))
        assert throttle.take() == ProgressReport("last", None)  # what the runner keeps with the outcome
        await anyio.sleep(0.3)
        group.cancel_scope.cancel()
    assert [message for _, message in written] == ["first", "then 49"]
    assert written[0][0] < 0.1 and 0.19 <= written[1][0] < 0.35
