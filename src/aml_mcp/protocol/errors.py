"""JSON-RPC errors this server raises, built in one place so their shapes never drift.

`STORAGE_UNAVAILABLE` (-32010) is defined with the HTTP layer's responses, which answer it with 503
and `Retry-After` whoever raised it; it is re-exported here with the other codes."""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aml_mcp.catalog.invocation import missing_capability
from aml_mcp.http.responses import STORAGE_UNAVAILABLE as STORAGE_UNAVAILABLE
from aml_mcp.http.responses import storage_unavailable_error
from aml_mcp.protocol.capabilities import TASKS_EXTENSION


def missing_tasks_extension() -> MCPError:
    return missing_capability({"extensions": {TASKS_EXTENSION: {}}}, TASKS_EXTENSION)


def invalid_params(message: str, data: Any = None) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message, data=data)


TOO_MANY_TASKS = -32011
"""Implementation-defined: the caller (or its tenant) already has as many unfinished tasks as it may,
or the caller created as many tasks as it may within the create window."""


def retry_hint(reason: str, retry_after_ms: int) -> dict[str, Any]:
    """`error.data` of a retryable refusal: a client backs off `retryAfterMs`, then sends the same request."""
    return {"reason": reason, "retryable": True, "retryAfterMs": retry_after_ms}


def storage_unavailable(cause: str, retry_after_ms: int = 1000) -> MCPError:
    """Storage failed for a reason that is not the request's: say so, and that a retry may succeed
    (`STORAGE_UNAVAILABLE`, answered with HTTP 503 and `Retry-After`).

    Nothing of the request was kept (each write is all-or-nothing), so retrying is safe.
    """
    return MCPError(**storage_unavailable_error(cause, retry_after_ms))


def too_many_tasks(holder: str, limit: int, retry_after_ms: int) -> MCPError:
    """A task create refused by a quota: `holder` is "you" or "your institution"."""
    return MCPError(
        code=TOO_MANY_TASKS,
        message=(
            f"Too many unfinished tasks for {holder} (at most {limit}); wait for one to finish or "
            "cancel one with tasks/cancel, then retry"
        ),
        data=retry_hint("too_many_tasks", retry_after_ms),
    )


def too_many_creates(limit: int, window_seconds: int, retry_after_ms: int) -> MCPError:
    """A task create refused by the per-principal create rate: the same code and hint as a quota."""
    return MCPError(
        code=TOO_MANY_TASKS,
        message=(
            f"Too many tasks created by you (at most {limit} in {window_seconds} s, finished ones "
            f"included); retry in {-(-retry_after_ms // 1000)} s"
        ),
        data=retry_hint("too_many_tasks", retry_after_ms),
    )
