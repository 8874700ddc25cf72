"""A task the server created for a tool call: wait for its result, follow it, answer it, cancel it.

Waiting listens (`subscriptions/listen` with the task's id) when the server streams task states and
falls back to polling `tasks/get` at the task's `pollIntervalMs` when it does not, or when the stream
is refused or lost. Either way every observed state goes through one path (`_observed`), which
deduplicates them, answers `input_required` through `on_input` when one was given, and ends at a
terminal state.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

import anyio
import mcp_types as types
from anyio.streams.memory import MemoryObjectReceiveStream

from aml_mcp.client.errors import TaskCancelled, TaskFailed
from aml_mcp.client.task_listen import ListenUnavailable, TaskListen
from aml_mcp.client.task_shapes import DEFAULT_POLL_INTERVAL_MS, TaskState

InputHandler = Callable[[str, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]
"""Answers one input request: `(key, {"method": ..., "params": ...})` → its response
(for `elicitation/create`: `{"action": "accept", "content": {...}}`, or `decline` / `cancel`)."""

BACKSTOP_POLL_SECONDS = 30.0
"""While listening, a `tasks/get` this often anyway: a stream that silently stops cannot hang a wait."""


class TaskOps(Protocol):
    """What a handle needs of its client (`McpClient` provides it)."""

    async def get_task(self, task_id: str) -> TaskState:
        """The state of `task_id`: an answer about any other task is refused, never returned."""
        ...

    async def update_task(self, task_id: str, responses: Mapping[str, Any]) -> None: ...

    async def cancel_task(self, task_id: str) -> None: ...

    def listen_tasks(self, task_ids: list[str]) -> AbstractAsyncContextManager[TaskListen]: ...

    def task_states(
        self, task_id: str
    ) -> AbstractAsyncContextManager[MemoryObjectReceiveStream[TaskState]]: ...

    @property
    def can_listen(self) -> bool: ...


def _fingerprint(state: TaskState) -> str:
    """Two observations of the same state (a poll and a notification) compare equal."""
    return json.dumps(
        [state.status, state.status_message, state.last_updated_at, sorted(state.input_requests or {})]
    )


class TaskHandle:
    """One task. Obtain it from `McpClient.call_tool` (or `McpClient.task`); use it inside the client's
    `async with`."""

    def __init__(
        self,
        ops: TaskOps,
        state: TaskState,
        *,
        on_input: InputHandler | None = None,
        listen: bool = True,
        clock: Callable[[], float] = anyio.current_time,
    ) -> None:
        self._ops = ops
        self.state = state
        """The newest state observed."""
        self.on_input = on_input
        self.listen = listen
        """Wait by listening when the server offers it (`False`: always poll)."""
        self._answered: set[str] = set()
        self._clock = clock

    @property
    def task_id(self) -> str:
        return self.state.task_id

    async def refresh(self) -> TaskState:
        """`tasks/get` now."""
        self.state = await self._ops.get_task(self.task_id)
        return self.state

    async def cancel(self) -> None:
        """`tasks/cancel`: the server acknowledges; the task ends `cancelled` unless it finished first."""
        await self._ops.cancel_task(self.task_id)

    async def answer(self, responses: Mapping[str, Mapping[str, Any]]) -> None:
        """`tasks/update` with `{key: response}` for the task's outstanding `inputRequests`."""
        await self._ops.update_task(self.task_id, dict(responses))
        self._answered.update(responses)

    def pending_inputs(self) -> dict[str, dict[str, Any]]:
        """The input requests of the newest state not answered yet (deduplicated across observations)."""
        if self.state.status != "input_required":
            return {}
        return {k: v for k, v in (self.state.input_requests or {}).items() if k not in self._answered}

    async def result(self) -> types.CallToolResult:
        """Wait for the task to end; its `CallToolResult` when completed (even `isError`).

        Raises `TaskFailed` (the JSON-RPC error) or `TaskCancelled`.
        """
        async for _ in self.statuses():
            pass
        return self.outcome()

    def outcome(self) -> types.CallToolResult:
        """The result of a terminal state (see `result`)."""
        state = self.state
        if state.status == "completed":
            return types.CallToolResult.model_validate(state.result or {"content": []})
        if state.status == "failed":
            raise TaskFailed(state)
        if state.status == "cancelled":
            raise TaskCancelled(state)
        raise RuntimeError(f"task {self.task_id} has not ended ({state.status})")

    async def statuses(self) -> AsyncIterator[TaskState]:
        """Each distinct state from the current one until a terminal one (included)."""
        seen: str | None = None
        async for observed in self._observe():
            state = observed
            if state.status == "input_required" and not state.input_requests:
                # A state that says input is needed but not which (a server may leave them out of
                # a notification): `tasks/get` must list them all.
                state = await self.refresh()
            self.state = state
            mark = _fingerprint(state)
            if mark == seen:
                continue
            seen = mark
            yield state
            if state.terminal:
                return
            if state.status == "input_required" and self.on_input is not None:
                await self._answer_with_handler()

    async def _answer_with_handler(self) -> None:
        assert self.on_input is not None
        pending = self.pending_inputs()
        if pending:
            answers = {key: dict(await self.on_input(key, request)) for key, request in pending.items()}
            await self.answer(answers)

    async def _observe(self) -> AsyncIterator[TaskState]:
        """Raw observations: the current state, then the stream's or the polls'."""
        yield self.state
        if self.state.terminal:
            return
        if self.listen and self._ops.can_listen:
            async with self._ops.task_states(self.task_id) as states:
                try:
                    async with self._ops.listen_tasks([self.task_id]) as stream:
                        if self.task_id in stream.honored:
                            async for state in self._listened(states, stream):
                                yield state
                                if state.terminal:
                                    return
                except ListenUnavailable:
                    pass
        async for state in self._polled():
            yield state
            if state.terminal:
                return

    async def _listened(
        self, states: MemoryObjectReceiveStream[TaskState], stream: TaskListen
    ) -> AsyncIterator[TaskState]:
        """States from the stream; one `tasks/get` after the acknowledgement (the task may have moved
        before the stream opened, and not every server sends the current state first)."""
        yield await self.refresh()
        while not stream.ended:
            with anyio.move_on_after(BACKSTOP_POLL_SECONDS) as timer:
                state = await _next_or_end(states, stream)
            if timer.cancelled_caught:
                yield await self.refresh()
            elif state is not None:
                yield state
        # The stream ended (the server closed it, or it dropped): what arrived meanwhile, then poll.
        while True:
            try:
                yield states.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream):
                return

    async def _polled(self) -> AsyncIterator[TaskState]:
        while True:
            interval = self.state.poll_interval_ms or DEFAULT_POLL_INTERVAL_MS
            await anyio.sleep(interval / 1000)
            yield await self.refresh()


async def _next_or_end(states: MemoryObjectReceiveStream[TaskState], stream: TaskListen) -> TaskState | None:
    """The next streamed state, or `None` once the stream has ended."""
    result: list[TaskState] = []
    async with anyio.create_task_group() as group:

        async def take() -> None:
            result.append(await states.receive())
            group.cancel_scope.cancel()

        async def end() -> None:
            await stream.wait_ended()
            group.cancel_scope.cancel()

        group.start_soon(take)
        group.start_soon(end)
    return result[0] if result else None
