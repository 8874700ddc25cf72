"""What a client call can end in besides a result."""

from __future__ import annotations

from typing import Any

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
