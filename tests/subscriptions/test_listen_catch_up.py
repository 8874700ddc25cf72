"""A stream that cannot be caught up is closed, never left open behind (D2), at the handler.

The fault test (`tests/faults/test_streams_across_resets.py`) does this over HTTP on a private
PostgreSQL; here the handler itself, with a task lookup that fails on command and a clock the test
moves: a resync that fails raises (so the event bus retries it), the stream stays open while it is
younger than `catch_up_seconds`, and is closed with `resync_failed` at the first resync after that;
a stream whose current state cannot be read at connect is closed at once (after three tries).
Before, a failed resync was logged and forgotten, and the stream stayed open for good.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp.principal import PRINCIPAL_SCOPE_KEY, Principal
from aml_mcp.subscriptions.bus import LocalEventBus
from aml_mcp.subscriptions.events import TaskChanged
from aml_mcp.subscriptions.listen import CLOSE_REASON_KEY, CatchUpFailed, ListenHandler, ListenParams
from aml_mcp.subscriptions.policy import CredentialPolicy
from tests.support.mcp_http import TASKS_EXTENSION
from tests.support.waiting import eventually_async

ALICE = Principal("https://issuer.example", "alice", "bank-a", "copilot")


class Lookup:
    """Alice's one task, `t1`; reading its state fails while `failing` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.reads = 0

    async def followable(self, task_id: str, principal: Principal) -> frozenset[str] | None:
        return frozenset() if task_id == "t1" else None

    async def scopes_to_follow(self, task_id: str, principal: Principal) -> frozenset[str]:
        return frozenset()

    async def snapshot(self, task_id: str, principal: Principal) -> TaskChanged | None:
        self.reads += 1
        if self.failing:
            raise RuntimeError("task storage unavailable: database unreachable")
        return TaskChanged(principal.owner, task_id, None, {"taskId": task_id, "status": "working"}, 1)


class Session:
    def __init__(self) -> None:
        self.client_capabilities = types.ClientCapabilities.model_validate(
            {"extensions": {TASKS_EXTENSION: {}}}
        )
        self.sent: list[str] = []

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        self.sent.append(notification.method)


def context(session: Session) -> Any:
    return SimpleNamespace(
        request_id="s1", request=SimpleNamespace(scope={PRINCIPAL_SCOPE_KEY: ALICE}), session=session
    )


def sent(session: Session) -> Callable[[], Awaitable[list[str]]]:
    async def probe() -> list[str]:
        return list(session.sent)

    return probe


def closed(result: dict[str, Any]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return bool(result)

    return probe


def handler(lookup: Lookup, clock: list[float]) -> ListenHandler:
    return ListenHandler(
        LocalEventBus(),
        served=frozenset({"tools"}),
        policy=CredentialPolicy(),
        tasks=lookup,
        catch_up_seconds=10.0,
        monotonic=lambda: clock[0],
    )


@pytest.mark.anyio
async def test_a_stream_behind_longer_than_catch_up_seconds_is_closed_at_the_next_resync() -> None:
    lookup, clock, session = Lookup(), [0.0], Session()
    listen = handler(lookup, clock)
    result: dict[str, Any] = {}

    async def serve() -> None:
        result.update(await listen(context(session), ListenParams(notifications={"taskIds": ["t1"]})))

    async with anyio.create_task_group() as group:
        group.start_soon(serve)
        await eventually_async(sent(session), until=lambda methods: len(methods) == 2)
        assert session.sent == ["notifications/subscriptions/acknowledged", "notifications/tasks"]
        lookup.failing = True
        with pytest.raises(CatchUpFailed):
            await listen.resync()  # the bus retries it
        clock[0] += 9.0
        with pytest.raises(CatchUpFailed):
            await listen.resync()
        assert listen.open_streams == 1, "still within catch_up_seconds: kept open"
        clock[0] += 1.0
        await listen.resync()  # past it: closed, nothing more owed
        await eventually_async(closed(result), what="the stream's final result")
    assert result["_meta"][CLOSE_REASON_KEY] == "resync_failed"
    assert listen.open_streams == 0


@pytest.mark.anyio
async def test_a_resync_that_succeeds_again_catches_the_stream_up() -> None:
    lookup, clock, session = Lookup(), [0.0], Session()
    listen = handler(lookup, clock)
    async with anyio.create_task_group() as group:
        group.start_soon(listen, context(session), ListenParams(notifications={"taskIds": ["t1"]}))
        await eventually_async(sent(session), until=lambda methods: len(methods) == 2)
        lookup.failing = True
        with pytest.raises(CatchUpFailed):
            await listen.resync()
        lookup.failing = False
        clock[0] += 5.0
        await listen.resync()
        clock[0] += 60.0
        lookup.failing = True
        with pytest.raises(CatchUpFailed):
            await listen.resync()  # behind again from now, not from the first failure
        assert listen.open_streams == 1
        listen.close_all()


@pytest.mark.anyio
async def test_a_stream_whose_current_state_cannot_be_read_at_connect_is_closed() -> None:
    lookup, clock, session = Lookup(), [0.0], Session()
    lookup.failing = True
    listen = handler(lookup, clock)
    with anyio.fail_after(5):
        result = await listen(context(session), ListenParams(notifications={"taskIds": ["t1"]}))
    assert session.sent == ["notifications/subscriptions/acknowledged"]
    assert result["_meta"][CLOSE_REASON_KEY] == "resync_failed"
    assert lookup.reads == 3
