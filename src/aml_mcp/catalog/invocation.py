"""What a tool or prompt body sees while it runs, whichever way it is run.

A body is written once against `InvocationContext`. Run synchronously, asking for input ends
the round with an `input_required` result (multi round-trip requests: the answers gathered so
far travel in the sealed `requestState`, so the server keeps nothing between rounds). Run as a
task, the same call parks the task in `input_required` until `tasks/update` brings the answers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import mcp_types as types
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


class InputRequired(Exception):
    """Ends a synchronous round: the body needs answers the request did not carry."""

    def __init__(self, requests: Mapping[str, InputRequest], request_state: str) -> None:
        super().__init__("input required")
        self.requests = dict(requests)
        self.request_state = request_state

    def result(self) -> types.InputRequiredResult:
        return types.InputRequiredResult(
            input_requests=self.requests,
            request_state=self.request_state,
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


class ProgressSink(Protocol):
    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class LogSink(Protocol):
    async def __call__(self, level: types.LoggingLevel, data: Any) -> None: ...


class RoundTripContext:
    """`InvocationContext` for a synchronous call: input requests become `input_required` rounds.

    Answers from earlier rounds come back inside the sealed `requestState`; the SDK's request-state
    boundary has already verified and opened it, so what arrives here is plaintext this server minted.
    """

    def __init__(
        self,
        *,
        principal: Principal,
        client_capabilities: types.ClientCapabilities,
        input_responses: Mapping[str, Any] | None,
        request_state: str | None,
        progress: ProgressSink,
        log: LogSink,
    ) -> None:
        self._principal = principal
        self._capabilities = client_capabilities
        self._carried = _decode_state(request_state)
        self._fresh = dict(input_responses) if isinstance(input_responses, Mapping) else {}
        self._used: dict[str, Any] = {}
        self._progress = progress
        self._log = log

    @property
    def principal(self) -> Principal:
        return self._principal

    @property
    def client_capabilities(self) -> types.ClientCapabilities:
        return self._capabilities

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        await self._progress(progress, total, message)

    async def log(self, level: types.LoggingLevel, data: Any) -> None:
        await self._log(level, data)

    @property
    def answers(self) -> dict[str, Any]:
        """Every valid answer this call holds, whether asked for yet or not (handed on to a task)."""
        held = {**self._carried, **self._fresh}
        return {**{k: v for k, v in held.items() if isinstance(v, dict)}, **self._used}

    async def request_inputs(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        missing: dict[str, InputRequest] = {}
        for key, request in requests.items():
            answer = self._answer(key, request)
            if answer is None:
                missing[key] = request
            else:
                self._used[key] = answer
        if missing:
            raise InputRequired(missing, json.dumps({"answers": self._used}, separators=(",", ":")))
        return {key: self._used[key] for key in requests}

    def _answer(self, key: str, request: InputRequest) -> Any | None:
        for source in (self._fresh, self._carried):
            if key in source and valid_response(request, source[key]):
                return source[key]
        return None


def _decode_state(request_state: str | None) -> dict[str, Any]:
    if not request_state:
        return {}
    try:
        decoded = json.loads(request_state)
    except ValueError:
        return {}
    answers = decoded.get("answers") if isinstance(decoded, dict) else None
    return answers if isinstance(answers, dict) else {}
