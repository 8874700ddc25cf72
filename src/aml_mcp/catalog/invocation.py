"""What a tool or prompt body sees while it runs, whichever way it is run.

A body is written once against `InvocationContext`. Run synchronously, asking for input ends
the round with an `input_required` result (multi round-trip requests, `protocol/round_trip.py`).
Run as a task, the same call parks the task in `input_required` until `tasks/update` brings the
answers (`tasks/task_context.py`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY
from pydantic import BaseModel, ValidationError

from aml_mcp.principal import Principal

InputRequest = dict[str, Any]
"""One server-to-client request carried in `inputRequests`: `{"method": ..., "params": {...}}`."""

_RESPONSE_MODELS: dict[str, type[BaseModel]] = {
    "elicitation/create": types.ElicitResult,
    "sampling/createMessage": types.CreateMessageResult,
    "roots/list": types.ListRootsResult,
}

_CAPABILITY_OF: dict[str, str] = {
    "elicitation/create": "elicitation",
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
}


def elicit_form(message: str, schema: Mapping[str, Any]) -> InputRequest:
    """An `elicitation/create` form request."""
    return {
        "method": "elicitation/create",
        "params": {"mode": "form", "message": message, "requestedSchema": dict(schema)},
    }


def sample(prompt: str, max_tokens: int) -> InputRequest:
    """A `sampling/createMessage` request with one user text message."""
    return {
        "method": "sampling/createMessage",
        "params": {
            "messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
            "maxTokens": max_tokens,
        },
    }


def list_roots() -> InputRequest:
    """A `roots/list` request."""
    return {"method": "roots/list", "params": {}}


def valid_response(request: InputRequest, response: Any) -> bool:
    """Whether `response` is a well-formed client result for `request` (never trust its shape)."""
    if not isinstance(response, dict):
        return False
    model = _RESPONSE_MODELS.get(str(request.get("method")))
    if model is None:
        return True
    try:
        model.model_validate(response)
    except ValidationError:
        return False
    return True


def client_supports(capabilities: types.ClientCapabilities | None, request: InputRequest) -> bool:
    """Whether the client declared the capability an input request needs."""
    name = _CAPABILITY_OF.get(str(request.get("method")))
    if name is None:
        return True
    return capabilities is not None and getattr(capabilities, name, None) is not None


def missing_capability(required: dict[str, Any], what: str) -> MCPError:
    """-32021 to raise when the call needs a client capability this request's `_meta` did not declare."""
    return MCPError(
        code=MISSING_REQUIRED_CLIENT_CAPABILITY,
        message=f"Missing required client capability: {what}",
        data={"requiredCapabilities": required},
    )


class InvocationContext(Protocol):
    """The body's handle on its caller and on the client."""

    @property
    def principal(self) -> Principal: ...

    @property
    def client_capabilities(self) -> types.ClientCapabilities: ...

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell the client how far along the work is (progress notifications, or a task's status message)."""

    async def log(self, level: types.LoggingLevel, data: Any) -> None:
        """A log entry for the client, sent only where the client opted in."""

    async def request_inputs(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """Ask the client for several inputs at once; returns every answer, keyed as asked."""


async def request_input(ctx: InvocationContext, key: str, request: InputRequest) -> Any:
    """Ask for one input."""
    return (await ctx.request_inputs({key: request}))[key]
