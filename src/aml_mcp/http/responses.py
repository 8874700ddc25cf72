"""JSON-RPC error bodies for refusals made at the HTTP layer, before any dispatch."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from starlette.responses import Response


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
    return Response(
        json.dumps(body, separators=(",", ":")),
        status_code=status,
        media_type="application/json",
        headers=dict(headers) if headers else None,
    )


def request_id_of(message: Any) -> Any:
    """The JSON-RPC id to echo, when the body had a usable one."""
    if isinstance(message, dict):
        request_id = message.get("id")
        if isinstance(request_id, str | int) and not isinstance(request_id, bool):
            return request_id
    return None
