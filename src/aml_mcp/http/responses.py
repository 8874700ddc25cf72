"""JSON-RPC error bodies for refusals made at the HTTP layer, before any dispatch.

Every 503 built here carries `Retry-After` (one second unless the caller knows better) and
`Cache-Control: no-store`: a 503 means "this server cannot answer now, the same request may
succeed later", and a client or a proxy can only act on that when it says when. A database fault
under a request the SDK answers is sent the same way: `storage_faults_as_503` turns its answer
carrying the retryable storage error (-32010, which the SDK's status table leaves at 200) into a 503
with `Retry-After`, so clients, proxies and the balancer see one kind of "try again".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Send

STORAGE_UNAVAILABLE = -32010
"""Implementation-defined (-32000..-32019): the server's storage cannot be written (or read) right
now — disk full, database locked past its timeout or unreachable, read-only, I/O error. Transient;
retry later. Answered with HTTP 503 and `Retry-After` wherever it is raised."""

DEFAULT_RETRY_AFTER_SECONDS = 1


def jsonrpc_error(
    status: int,
    code: int,
    message: str,
    *,
    request_id: Any = None,
    data: Any = None,
    headers: Mapping[str, str] | None = None,
) -> Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    body = {"jsonrpc": "2.0", "id": request_id, "error": error}
    sent = dict(headers) if headers else {}
    if status == 503:
        names = {name.lower() for name in sent}
        if "retry-after" not in names:
            sent["Retry-After"] = str(retry_after_seconds(data))
        if "cache-control" not in names:
            sent["Cache-Control"] = "no-store"
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
        headers=sent or None,
    )


def retry_after_seconds(data: Any) -> int:
    """`Retry-After` for an error whose `data` may hold a `retryAfterMs` hint: the hint rounded up
    to whole seconds, else `DEFAULT_RETRY_AFTER_SECONDS`."""
    after = data.get("retryAfterMs") if isinstance(data, dict) else None
    if isinstance(after, int) and not isinstance(after, bool) and after > 0:
        return max(1, -(-after // 1000))
    return DEFAULT_RETRY_AFTER_SECONDS


def storage_unavailable_error(cause: str, retry_after_ms: int = 1000) -> dict[str, Any]:
    """The JSON-RPC error object (code, message, data) of a request a storage fault stopped: nothing
    of it was kept (each write is all-or-nothing), so the same request may simply be sent again."""
    return {
        "code": STORAGE_UNAVAILABLE,
        "message": f"Storage temporarily unavailable ({cause}); nothing was changed, retry later",
        "data": {"reason": "storage_unavailable", "retryable": True, "retryAfterMs": retry_after_ms},
    }


def storage_unavailable_response(
    cause: str, *, request_id: Any = None, retry_after_ms: int = 1000
) -> Response:
    """The 503 for a request a storage fault stopped, for the routes that answer by themselves: the
    same error `tools/call` and `tasks/*` answer (`storage_unavailable_error`)."""
    error = storage_unavailable_error(cause, retry_after_ms)
    return jsonrpc_error(503, error["code"], error["message"], request_id=request_id, data=error["data"])


def request_id_of(message: Any) -> Any:
    """The JSON-RPC id to echo, when the body had a usable one."""
    if isinstance(message, dict):
        request_id = message.get("id")
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            return request_id
    return None


_MARK = str(STORAGE_UNAVAILABLE).encode()
_MAX_ERROR_BODY = 16_384
"""A storage error's body is a few hundred bytes (more only with a very long request id): larger
bodies are results and are never looked into."""


def storage_faults_as_503(send: Send) -> Send:
    """`send` for the SDK's answer to one request: a JSON body that is the retryable storage error
    goes out as `503` with `Retry-After` (from its `retryAfterMs`); everything else unchanged.

    Only a complete JSON body of at most `_MAX_ERROR_BODY` bytes holding the code's digits is
    parsed, so results and streams cost a header check and, for small bodies, a byte search."""
    held: Message | None = None

    async def answer(message: Message) -> None:
        nonlocal held
        if message["type"] == "http.response.start" and message.get("status") == 200 and _is_json(message):
            held = message
            return
        if held is not None:
            start, held = held, None
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                start = _as_unavailable(start, message.get("body", b""))
            await send(start)
        await send(message)

    return answer


def _is_json(start: Message) -> bool:
    return any(
        name == b"content-type" and value.startswith(b"application/json")
        for name, value in start.get("headers", ())
    )


def _as_unavailable(start: Message, body: bytes) -> Message:
    if len(body) > _MAX_ERROR_BODY or _MARK not in body:
        return start
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        return start
    if not isinstance(error, dict) or error.get("code") != STORAGE_UNAVAILABLE:
        return start
    headers = [
        *start.get("headers", ()),
        (b"retry-after", str(retry_after_seconds(error.get("data"))).encode()),
        (b"cache-control", b"no-store"),
    ]
    return {**start, "status": 503, "headers": headers}
