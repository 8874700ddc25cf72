"""The shapes clients see: the flat `CreateTaskResult`, the detailed task of `tasks/get`, the acks.

Structured progress, once a body reported some, rides in the task's `_meta` as
`"aml-mcp/progress": {"done": n, "total": m}` (`total` left out when the body cannot tell), in the
create answer, `tasks/get` and `notifications/tasks` alike.

Only what the status calls for is shown: `inputRequests` (outstanding keys only) while waiting
for input, `result` once completed, `error` once failed. Internal fields (owner, lease, arguments,
version) never leave the server.
"""

from __future__ import annotations

import time
from typing import Any

from aml_mcp.tasks.model import PROGRESS_META_KEY, TaskRecord, TaskStatus


def iso(epoch_ms: int) -> str:
    """ISO 8601 in UTC with millisecond precision, e.g. `2026-07-28T10:30:00.123Z`."""
    seconds, millis = divmod(epoch_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def _task_fields(task: TaskRecord, poll_interval_ms: int) -> dict[str, Any]:
    created = iso(task.created_at)
    fields: dict[str, Any] = {
        "taskId": task.task_id,
        "status": task.status.value,
        "createdAt": created,
        "lastUpdatedAt": created if task.updated_at == task.created_at else iso(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": poll_interval_ms,
    }
    if task.status_message is not None:
        fields["statusMessage"] = task.status_message
    if task.progress is not None:
        fields["_meta"] = {PROGRESS_META_KEY: task.progress.wire()}
    return fields


def create_task_result(task: TaskRecord, poll_interval_ms: int) -> dict[str, Any]:
    """`CreateTaskResult`: the task's seed state, flat, with `resultType: "task"`."""
    return {"resultType": "task", **_task_fields(task, poll_interval_ms)}


def detailed_task(task: TaskRecord, poll_interval_ms: int) -> dict[str, Any]:
    """`GetTaskResult`: the complete current state, with the payload its status requires."""
    fields = {"resultType": "complete", **_task_fields(task, poll_interval_ms)}
    if task.status is TaskStatus.INPUT_REQUIRED:
        fields["inputRequests"] = dict(task.input_requests)
    elif task.status is TaskStatus.COMPLETED and task.result is not None:
        fields["result"] = task.result
    elif task.status is TaskStatus.FAILED and task.error is not None:
        fields["error"] = task.error
    return fields


def ack() -> dict[str, Any]:
    """The empty acknowledgement of `tasks/update` and `tasks/cancel`."""
    return {"resultType": "complete"}
