"""Building 2026-07-28 requests by hand, so tests control every header and byte on the wire."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

PROTOCOL_VERSION = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


def envelope(capabilities: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": dict(capabilities or {}),
        "io.modelcontextprotocol/clientInfo": {"name": "aml-mcp-tests", "version": "0"},
        **extra,
    }


def message(
    method: str, params: Mapping[str, Any] | None = None, *, request_id: Any = 1, **meta: Any
) -> dict[str, Any]:
    body_params = {**(params or {}), "_meta": envelope(**meta)}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params}


def headers_for(body: Mapping[str, Any], **overrides: str | None) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
        "mcp-method": str(body.get("method")),
    }
    params = body.get("params") or {}
    field = NAME_FIELD.get(str(body.get("method")))
    if field and field in params:
        headers["mcp-name"] = str(params[field])
    elif str(body.get("method", "")).startswith("tasks/") and "taskId" in params:
        headers["mcp-name"] = str(params["taskId"])
    for key, value in overrides.items():
        name = key.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def post(client: httpx.Client, body: Mapping[str, Any], **header_overrides: str | None) -> httpx.Response:
    return client.post("/mcp", content=json.dumps(body), headers=headers_for(body, **header_overrides))


def sse_messages(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of a streamed (SSE) response, in order."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())
