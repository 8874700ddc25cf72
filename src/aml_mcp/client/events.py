"""Hands each `notifications/tasks` the client receives to whoever is waiting on that task.

The SDK delivers an extension's notifications to one handler per method for the whole client; the
handles of several tasks may be waiting at once, each on its own listen stream or a shared one, so
the handler fans out by task id. Delivery never blocks the session: each waiter's queue is unbounded, which is
safe because a waiter follows one task, whose states are few and which it reads as they come (and
dropping one could drop the terminal state).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from aml_mcp.client.task_shapes import TaskState


class TaskEvents:
    """Task id → the waiters' queues."""

    def __init__(self) -> None:
        self._waiters: dict[str, set[MemoryObjectSendStream[TaskState]]] = {}

    async def deliver(self, state: TaskState) -> None:
        """The notification handler: offer the state to every waiter on its task."""
        for send in list(self._waiters.get(state.task_id, ())):
            try:
                send.send_nowait(state)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self._waiters.get(state.task_id, set()).discard(send)

    @contextmanager
    def waiting(self, task_id: str) -> Iterator[MemoryObjectReceiveStream[TaskState]]:
        """Receive the states of `task_id` delivered while inside the block."""
        send, receive = anyio.create_memory_object_stream[TaskState](math.inf)
        self._waiters.setdefault(task_id, set()).add(send)
        try:
            yield receive
        finally:
            waiters = self._waiters.get(task_id)
            if waiters is not None:
                waiters.discard(send)
                if not waiters:
                    del self._waiters[task_id]
            send.close()
            receive.close()
