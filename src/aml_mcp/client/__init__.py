"""A Python client for MCP servers (2026-07-28) with the Tasks extension, on the official SDK.

`McpClient.call_tool` returns a tool's result, or a `TaskHandle` when the server runs the call as a
task: `await handle.result()` waits by listening (falling back to polling), `handle.statuses()`
follows it, `handle.answer()` / `on_input` answer `input_required`, `handle.cancel()` cancels it.
Every call carries an idempotency key, and a call that gets no answer (a connection error, 502,
503) is sent again with it, so a retried create never makes a second task (`aml_mcp.client.retries`).
See docs/python-client.md.
"""

from __future__ import annotations

from aml_mcp.client.answer_limit import DEFAULT_MAX_ANSWER_BYTES
from aml_mcp.client.auth import BearerAuth
from aml_mcp.client.connection import McpClient
from aml_mcp.client.errors import (
    AnswerRefused,
    AnswerTooLarge,
    CompressedAnswer,
    InputUnavailable,
    TaskCancelled,
    TaskEnded,
    TaskFailed,
    WrongTask,
)
from aml_mcp.client.handle import InputHandler, TaskHandle
from aml_mcp.client.task_shapes import TASKS_EXTENSION, TaskState
from aml_mcp.client.tracing import new_traceparent

__all__ = [
    "DEFAULT_MAX_ANSWER_BYTES",
    "TASKS_EXTENSION",
    "AnswerRefused",
    "AnswerTooLarge",
    "BearerAuth",
    "CompressedAnswer",
    "InputHandler",
    "InputUnavailable",
    "McpClient",
    "TaskCancelled",
    "TaskEnded",
    "TaskFailed",
    "TaskHandle",
    "TaskState",
    "WrongTask",
    "new_traceparent",
]
