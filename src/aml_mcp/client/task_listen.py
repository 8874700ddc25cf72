"""`subscriptions/listen` for tasks: the SDK's listen stream with `notifications.taskIds`.

The SDK's `listen()` builds its filter from four fixed keywords and has no `taskIds`, which is what
the Tasks extension adds to the filter. This opens the same stream the same way — the SDK session
stamps the request (version, capabilities, headers), registers the stream's route so the session
consumes its acknowledgement, and sends it on the session's own task group — with the task ids in
the filter. The `notifications/tasks` on the stream reach `TaskEvents` through the extension's
notification binding. The private session members used here are the ones the SDK's own `listen()`
uses; they are pinned with the SDK version.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

ACK_TIMEOUT_SECONDS = 10.0
"""How long to wait for the server's acknowledgement before falling back to polling."""


class ListenUnavailable(RuntimeError):
    """The server could not, or would not, stream these tasks' states (the caller polls instead)."""


@dataclass
class TaskListen:
    """An open stream: the task ids the server agreed to report, and whether the stream still runs."""

    honored: frozenset[str]
    _ended: anyio.Event

    @property
    def ended(self) -> bool:
        return self._ended.is_set()

    async def wait_ended(self) -> None:
        await self._ended.wait()


@asynccontextmanager
async def listen_for_tasks(session: ClientSession, task_ids: Sequence[str]) -> AsyncIterator[TaskListen]:
    """Open a listen stream for `task_ids`; raise `ListenUnavailable` when it cannot be opened."""
    if session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        raise ListenUnavailable(f"subscriptions/listen needs 2026-07-28, not {session.protocol_version}")
    task_group = session._task_group
    if task_group is None:
        raise ListenUnavailable("the session is not open")
    request = types.SubscriptionsListenRequest(
        params=types.SubscriptionsListenRequestParams(
            notifications=types.SubscriptionFilter.model_validate({"taskIds": list(task_ids)})
        )
    )
    request_id = f"tasks-listen-{secrets.token_hex(8)}"
    data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
    opts: CallOptions = {"request_id": request_id}
    session._stamp(data, opts)
    ended = anyio.Event()
    driver_scope = anyio.CancelScope()
    route = session._register_listen_route(request_id)

    async def drive() -> None:
        with driver_scope:
            try:
                await session._dispatcher.send_raw_request(data["method"], data.get("params"), opts)
            except MCPError as error:
                route.settle("lost", error=error)
            except Exception as error:  # a transport fault ends this stream only; the caller polls
                route.settle("lost", error=MCPError(types.INTERNAL_ERROR, str(error)))
            else:
                route.set_acked(types.SubscriptionFilter())
                route.settle("graceful")
        ended.set()

    try:
        task_group.start_soon(drive)
        try:
            with anyio.fail_after(ACK_TIMEOUT_SECONDS):
                await route.acked.wait()
        except TimeoutError as exc:
            raise ListenUnavailable("the server did not acknowledge the listen stream") from exc
        if route.honored is None or route.end is not None:
            reason = route.error.message if route.error is not None else "closed before acknowledging"
            raise ListenUnavailable(f"the listen stream was refused: {reason}")
        raw = route.honored.model_dump(by_alias=True, mode="json").get("taskIds") or []
        honored = frozenset(str(task_id) for task_id in raw)
        yield TaskListen(honored=honored, _ended=ended)
    finally:
        route.settle("local")
        driver_scope.cancel()
        session._unregister_listen_route(request_id)


__all__ = ["ListenUnavailable", "TaskListen", "listen_for_tasks"]
