"""The Tasks extension's wire shapes, as the client reads and sends them.

The SDK's `mcp_types` carries only the 2025-era task types; the 2026-07-28 extension
(`io.modelcontextprotocol/tasks`) has a `resultType: "task"` result, `tasks/get|update|cancel`
requests that route by `Mcp-Name: <taskId>`, and `notifications/tasks` carrying the detailed task.
They are declared here once, on the SDK's own base models, so the SDK's session sends and
validates them like any other request.
"""

from __future__ import annotations

from typing import Any, Literal

import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The extension identifier, declared in the client's per-request capabilities."""

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
"""A task in one of these never changes again."""

DEFAULT_POLL_INTERVAL_MS = 1000
"""Used when the server suggests no `pollIntervalMs`."""


class TaskState(BaseModel):
    """A `DetailedTask`: what `tasks/get` answers and `notifications/tasks` carries.

    Unknown fields are kept (`extra="allow"`): a later revision may add some, and the CLI prints the
    task as the server sent it.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, dict[str, Any]] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    meta: dict[str, Any] | None = Field(alias="_meta", default=None)

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES

    def wire(self) -> dict[str, Any]:
        """The task as JSON, without the envelope's `_meta`."""
        return self.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"meta"})


class CreateTaskResult(types.Result):
    """The `tools/call` result that hands back a task instead of the tool's result."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str | None = None
    last_updated_at: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None

    def state(self) -> TaskState:
        return TaskState.model_validate(
            self.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"result_type", "meta"})
        )


class TaskIdParams(types.RequestParams):
    task_id: str


class UpdateTaskParams(TaskIdParams):
    input_responses: dict[str, Any]


class GetTaskRequest(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class UpdateTaskRequest(types.Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CancelTaskRequest(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class GetTaskResult(TaskState):
    """`tasks/get`'s result: the detailed task, `resultType: "complete"`."""

    result_type: str | None = None


class Acknowledgement(types.Result):
    """The empty result of `tasks/update` and `tasks/cancel`."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    result_type: str | None = None
