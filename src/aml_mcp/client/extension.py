"""The Tasks extension as an SDK client extension: the capability it declares, the `resultType: "task"`
result it claims on `tools/call`, and the `notifications/tasks` it observes.

This is the SDK's own extension hook (`mcp.client.ClientExtension`), so the SDK declares the
extension in every request's capabilities, parses the task result, and routes the notifications; the
client here only decides what to do with them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import mcp_types as types
from mcp.client.extension import ClaimContext, ClientExtension, NotificationBinding, ResultClaim

from aml_mcp.client.events import TaskEvents
from aml_mcp.client.task_shapes import TASKS_EXTENSION, CreateTaskResult, TaskState

Resolver = Callable[[CreateTaskResult, ClaimContext], Awaitable[types.CallToolResult]]


class TasksExtension(ClientExtension):
    """Declares `io.modelcontextprotocol/tasks`; claims `resultType: "task"`; feeds `events`.

    `resolve` finishes a task result for callers that use the SDK's `Client.call_tool` directly
    (which must return a `CallToolResult`); `aml_mcp.client.McpClient` takes the claimed result
    itself and returns a `TaskHandle` instead.
    """

    identifier = TASKS_EXTENSION

    def __init__(self, events: TaskEvents, resolve: Resolver) -> None:
        self._events = events
        self._resolve = resolve

    def settings(self) -> dict[str, Any]:
        return {}

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return (ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve),)

    def notifications(self) -> Sequence[NotificationBinding[Any]]:
        return (
            NotificationBinding(
                method="notifications/tasks", params_type=TaskState, handler=self._events.deliver
            ),
        )
