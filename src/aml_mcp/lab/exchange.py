"""One MCP request sent to this server's own `/mcp` endpoint, inside the process.

The simulation must show what the server really answers, so its requests take the path every
client's does — the admission (gate, revocation, scopes, audit), the SDK, the handlers — but they
never touch a socket and never leave the process, so the credentials they carry cannot either.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from mcp.shared.inbound import encode_header_value
from mcp_types.version import LATEST_MODERN_VERSION
from starlette.types import ASGIApp

_CLIENT_CAPABILITIES: dict[str, Any] = {
    "extensions": {"io.modelcontextprotocol/tasks": {}},
    "elicitation": {},
}
_NAMED_BY = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


@dataclass(frozen=True, slots=True)
class Exchange:
    """What came back: status, challenge and JSON-RPC message (`None` when the body was not JSON)."""

    status: int
    challenge: str | None
    message: Any


class InProcessMcp:
    """Sends requests to `endpoint` (the ASGI app serving `url`) as a client of `url` would."""

    def __init__(self, endpoint: ASGIApp, *, url: str) -> None:
        parts = urlsplit(url)
        self._endpoint = endpoint
        self._origin = f"{parts.scheme}://{parts.netloc}"
        self._path = parts.path or "/"

    async def __call__(
        self, method: str, params: Mapping[str, Any], token: str | None, traceparent: str
    ) -> Exchange:
        meta = {
            "traceparent": traceparent,
            "io.modelcontextprotocol/protocolVersion": LATEST_MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": _CLIENT_CAPABILITIES,
            "io.modelcontextprotocol/clientInfo": {"name": "aml-mcp-lab-simulation", "version": "1"},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "content-type": "application/json",
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": LATEST_MODERN_VERSION,
            "mcp-method": method,
        }
        name = params.get(_NAMED_BY.get(method, "taskId" if method.startswith("tasks/") else ""))
        if isinstance(name, str):
            headers["mcp-name"] = encode_header_value(name)
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        transport = httpx.ASGITransport(app=self._endpoint, client=("127.0.0.1", 0))
        async with httpx.AsyncClient(transport=transport, base_url=self._origin) as client:
            response = await client.post(self._path, content=json.dumps(body), headers=headers)
        try:
            message = response.json()
        except ValueError:
            message = None
        return Exchange(response.status_code, response.headers.get("www-authenticate"), message)
