"""Header limits on every route, checked on the ASGI scope before any other middleware reads it.

Starlette's `Headers` looks a name up by scanning the whole list, and the SDK builds a dict of
them key by key, so a request with 20,000 header fields costs quadratic time on the event loop —
every other client waits. Counting them is linear and cheap, so this runs first, whatever the
HTTP server in front enforces (the one `aml-mcp serve` runs also bounds the head's bytes while it
is still being received: `http.protocol`).
"""

from __future__ import annotations

from mcp_types import INVALID_REQUEST
from starlette.types import ASGIApp, Receive, Scope, Send

from aml_mcp.http.responses import jsonrpc_error

_FIELD_OVERHEAD = 4
"""`: ` and CRLF around each field on the wire."""


class HeaderLimits:
    """Refuses with 431 (and a JSON-RPC error body) a request with too many or too large header fields."""

    def __init__(self, app: ASGIApp, *, max_count: int, max_bytes: int) -> None:
        self.app = app
        self.max_count = max_count
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not self._within_limits(scope["headers"]):
            refusal = jsonrpc_error(
                431,
                INVALID_REQUEST,
                f"Request header fields too large: at most {self.max_count} fields and "
                f"{self.max_bytes} bytes are accepted",
                headers={"connection": "close"},
            )
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _within_limits(self, headers: list[tuple[bytes, bytes]]) -> bool:
        if len(headers) > self.max_count:
            return False
        size = sum(len(name) + len(value) for name, value in headers)
        return size + _FIELD_OVERHEAD * len(headers) <= self.max_bytes
