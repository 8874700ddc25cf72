"""What a client call can end in besides a result."""

from __future__ import annotations

from typing import Any

import httpx2

from aml_mcp.client.task_shapes import TaskState


class TaskEnded(Exception):
    """A task ended without a result."""

    def __init__(self, state: TaskState, message: str) -> None:
        super().__init__(message)
        self.state = state


class TaskFailed(TaskEnded):
    """The task ended `failed`: `error` is the JSON-RPC error it failed with."""

    def __init__(self, state: TaskState) -> None:
        self.error: dict[str, Any] = dict(state.error or {})
        message = str(self.error.get("message") or state.status_message or "the task failed")
        super().__init__(state, f"task {state.task_id} failed: {message}")


class TaskCancelled(TaskEnded):
    """The task ended `cancelled`."""

    def __init__(self, state: TaskState) -> None:
        super().__init__(state, f"task {state.task_id} was cancelled")


class InputUnavailable(Exception):
    """The server asked for input this client cannot give; `requests` is what it asked, by key."""

    def __init__(self, requests: dict[str, dict[str, Any]]) -> None:
        self.requests = requests
        asked = "; ".join(f"{key}: {describe_request(request)}" for key, request in requests.items())
        super().__init__(f"the server asked for input that was not given: {asked}")


def describe_request(request: dict[str, Any]) -> str:
    """One line for an input request: its message and the fields it wants."""
    params = request.get("params") or {}
    message = str(params.get("message") or request.get("method") or "input")
    fields = sorted(((params.get("requestedSchema") or {}).get("properties") or {}).keys())
    return f"{message} (fields: {', '.join(fields)})" if fields else message


class AnswerRefused(Exception):
    """The server's answer broke a rule this client holds every server to, and none of it was used:
    it was larger than the client reads, compressed, or about another task than the one asked for."""


class AnswerTooLarge(AnswerRefused, httpx2.StreamError):
    """An answer (a JSON body, or one event of a stream) ran past `max_answer_bytes`; reading stopped
    there. Also an `httpx2.StreamError`, which is what the SDK's transport turns into a JSON-RPC
    error for the one request instead of ending the connection."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(
            f"the server's answer is larger than {max_bytes} bytes, the most this client reads"
            " (max_answer_bytes); it was not read further"
        )
        self.max_bytes = max_bytes


class CompressedAnswer(AnswerRefused, httpx2.StreamError):
    """The server compressed an answer although the client asked for `identity`: its size on the
    wire says nothing about the size it would inflate to, so it is refused unread."""

    def __init__(self, encoding: str) -> None:
        super().__init__(
            f"the server sent a compressed answer (Content-Encoding: {encoding}), which this client"
            " does not read"
        )


class WrongTask(AnswerRefused):
    """A `tasks/get`, `tasks/update` or `tasks/cancel` answer named another task than the one asked
    for. The other task is not shown: it is none of this caller's business."""

    def __init__(self, method: str, task_id: str) -> None:
        super().__init__(f"the server's answer to {method} for task {task_id} is about another task: refused")
        self.task_id = task_id
