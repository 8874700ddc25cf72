"""A result that leaves out `resultType` reads as `"complete"`, as 2026-07-28 tells a client to assume,
rather than failing the SDK's schema check (the official client suite sends such a result)."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from aml_mcp.client import McpClient
from tests.support.live_server import LiveServer


def _server_without_result_types() -> Starlette:
    """A bare 2026-07-28 endpoint whose results never name their `resultType`."""

    async def mcp(request: Request) -> JSONResponse:
        message: dict[str, Any] = await request.json()
        if message["method"] == "tools/list":
            tool = {
                "name": "echo",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
            result: dict[str, Any] = {
                "tools": [tool],
                "ttlMs": 0,
                "cacheScope": "private",
                "resultType": "complete",
            }
        else:
            text = message["params"]["arguments"]["text"]
            result = {"content": [{"type": "text", "text": text}]}
        return JSONResponse({"jsonrpc": "2.0", "id": message["id"], "result": result})

    return Starlette(routes=[Route("/mcp", mcp, methods=["POST"])])


def test_a_result_without_result_type_is_read_as_complete() -> None:
    async def main() -> types.CallToolResult | object:
        async with McpClient(f"{server.url}/mcp", mode="2026-07-28", listen=False, tasks=False) as client:
            return await client.call_tool("echo", {"text": "plain"})

    with LiveServer(_server_without_result_types()) as server:
        outcome = anyio.run(main)
    assert isinstance(outcome, types.CallToolResult), outcome
    assert outcome.content == [types.TextContent(type="text", text="plain")]
