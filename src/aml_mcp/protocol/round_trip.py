"""`InvocationContext` for a synchronous call: asking for input ends the round (multi round-trip).

The answers gathered so far travel in the sealed `requestState`, so the server keeps nothing
between rounds; the SDK's request-state boundary has verified and opened it before this runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

import mcp_types as types

from aml_mcp.catalog.invocation import InputRequest, valid_response
from aml_mcp.principal import Principal


class ProgressSink(Protocol):
    async def __call__(self, progress: float, total: float | None, message: str | None) -> None: ...


class LogSink(Protocol):
    async def __call__(self, level: types.LoggingLevel, data: Any) -> None: ...


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


class RoundTripContext:
    """`InvocationContext` for a synchronous call: input requests become `input_required` rounds.

    What arrives in `request_state` is plaintext this server minted (opened by the SDK's boundary).
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
        """The answers to input requests this server made, handed on to a task: those the
        preflight used in this round, and those carried in the sealed `requestState` (used in an
        earlier round). Fresh answers nobody asked for are dropped, never stored."""
        carried = {key: value for key, value in self._carried.items() if isinstance(value, dict)}
        return {**carried, **self._used}

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
