"""The `/mcp` endpoint: the checks that belong to HTTP, then the SDK's stateless entry.

Order of work for one POST: method → body (bounded, and complete: a body cut short by a
disconnect is never processed) → body well-formed (valid Unicode, bounded nesting: refused once,
here, and audited) → admission (who is calling, may they make this request) → protocol revision
(`versions.py`: a handshake-era request learns how to speak 2026-07-28) → hand over to the SDK.
Plain requests go to an SDK entry in JSON response mode (half the cost of SSE mode); requests
that stream — a listen, or a call that asked for progress or log messages — go to one in SSE mode.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, LOG_LEVEL_META_KEY, PARSE_ERROR
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from aml_mcp.audit import AuditEvent, AuditRecorder, Decision, task_reference
from aml_mcp.audit.decisions import deciding
from aml_mcp.http.responses import (
    jsonrpc_error,
    request_id_of,
    storage_faults_as_503,
    storage_unavailable_response,
)
from aml_mcp.http.versions import version_refusal
from aml_mcp.http.wellformed import BodyDefect, body_defect, escaped
from aml_mcp.principal import LOCAL_PRINCIPAL, PRINCIPAL_SCOPE_KEY, Principal
from aml_mcp.store.faults import storage_fault

logger = logging.getLogger(__name__)


class Admission(Protocol):
    """Decides who is calling and whether they may make this request.

    Returns the verified principal, or the HTTP response that refuses the request (401/403 with
    their `WWW-Authenticate` challenge). `message` is the decoded JSON body, or `None` when the
    body is not JSON (the protocol layer answers that with a parse error once admitted).
    """

    async def admit(self, request: Request, message: Any) -> Principal | Response: ...


class OpenAdmission:
    """Authentication off: every request is the local principal. Only ever used on loopback."""

    async def admit(self, request: Request, message: Any) -> Principal | Response:
        return LOCAL_PRINCIPAL


class BodyTooLarge(Exception):
    pass


class ClientDisconnected(Exception):
    """The client went away (or was cut off by the read timeout) before its body was complete."""


async def read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    """The whole body, or an exception: a body cut short is never taken for a complete one."""
    declared = headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnected
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def streams(message: Any) -> bool:
    """Whether the answer to this request is a stream of messages rather than one JSON body."""
    if not isinstance(message, dict):
        return False
    if message.get("method") == "subscriptions/listen":
        return True
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and ("progressToken" in meta or LOG_LEVEL_META_KEY in meta)


class McpEndpoint:
    """ASGI app for `/mcp`."""

    def __init__(
        self,
        *,
        plain: StreamableHTTPSessionManager,
        streaming: StreamableHTTPSessionManager,
        admission: Admission,
        max_body_bytes: int,
        max_json_depth: int = 64,
        audit: AuditRecorder | None = None,
    ) -> None:
        self.plain = plain
        self.streaming = streaming
        self.admission = admission
        self.max_body_bytes = max_body_bytes
        self.max_json_depth = max_json_depth
        self.record = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.record is None:
            await self._serve(scope, receive, send)
            return
        # One audit record per request: an allow the gate holds for a handler that decides the
        # request itself is written here if that handler is never reached (`audit.decisions`).
        with deciding(self.record):
            await self._serve(scope, receive, send)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        # RFC 9110 §5.5: optional whitespace around a field value is not part of it. h11 strips it,
        # httptools (uvicorn's faster parser) does not, and the SDK compares `Mcp-*` values verbatim.
        scope["headers"] = [(name, value.strip(b" \t")) for name, value in scope["headers"]]
        request = Request(scope, receive)
        if request.method != "POST":
            # No standalone GET stream and no DELETE of a session at this revision.
            await Response(status_code=405, headers={"Allow": "POST"})(scope, receive, send)
            return
        try:
            body = await read_body(receive, request.headers, self.max_body_bytes)
        except BodyTooLarge:
            refusal = jsonrpc_error(413, INVALID_REQUEST, f"Request body exceeds {self.max_body_bytes} bytes")
            await refusal(scope, receive, send)
            return
        except ClientDisconnected:
            return
        try:
            message: Any = json.loads(body)
        except (ValueError, RecursionError):
            message = None
        else:
            defect = body_defect(body, message, max_depth=self.max_json_depth)
            if defect is not None:
                await self._malformed(defect, message)(scope, receive, send)
                return

        try:
            verdict = await self.admission.admit(request, message)
        except Exception as error:
            # Admission decides on hostile input before anything else has checked it; whatever it
            # trips over, the request is refused (fail closed) with a JSON-RPC body, and recorded:
            # a storage fault as the retryable 503 it is, anything else as a 500.
            self._audit("admission_error", message)
            verdict = admission_failed(error, request_id_of(message))
        if isinstance(verdict, Response):
            await verdict(scope, receive, send)
            return
        scope[PRINCIPAL_SCOPE_KEY] = verdict

        version_refused = version_refusal(request.headers.get("mcp-protocol-version"), message)
        if version_refused is not None:
            await version_refused(scope, receive, send)
            return

        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        manager = self.streaming if streams(message) else self.plain
        await manager.handle_request(scope, replay, storage_faults_as_503(send))

    def _malformed(self, defect: BodyDefect, message: Any) -> Response:
        """A body no later layer may be handed: a parse error (id unknown, so `null`), audited once."""
        self._audit(defect.reason, message, detail={"field": defect.path})
        return jsonrpc_error(400, PARSE_ERROR, defect.message)

    def _audit(self, reason: str, message: Any, detail: Mapping[str, Any] | None = None) -> None:
        """A refusal made before anyone is known: the fields the body names, escaped and clipped."""
        if self.record is None:
            return
        method, target = _named(message)
        self.record(
            AuditEvent(decision=Decision.DENY, reason=reason, method=method, target=target, detail=detail)
        )


def admission_failed(error: Exception, request_id: Any) -> Response:
    """The refusal of a request whose admission raised: 503 (retryable) for a storage fault, else 500."""
    cause = storage_fault(error)
    if cause is not None:
        logger.warning("admission could not decide (%s); the request is refused as retryable", cause)
        return storage_unavailable_response(cause, request_id=request_id)
    logger.error("admission raised; the request is refused", exc_info=error)
    return jsonrpc_error(500, INTERNAL_ERROR, "Internal error", request_id=request_id)


def _named(message: Any) -> tuple[str | None, str | None]:
    """Method and target (tool or prompt name, resource URI, task id prefix) as printable ASCII."""
    if not isinstance(message, dict):
        return None, None
    method = message.get("method")
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    target = next((params[f] for f in ("name", "uri") if isinstance(params.get(f), str)), None)
    if target is None:
        target = task_reference(params.get("taskId"))
    return (
        escaped(method) if isinstance(method, str) else None,
        escaped(target) if target is not None else None,
    )
