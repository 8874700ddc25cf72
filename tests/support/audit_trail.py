"""Helpers for tests of the audit trail: a one-tool catalog, raw requests, and both copies of the trail.

The trail has two copies — the `audit_events` table and `DATA_DIR/audit.jsonl` — and a test about
losing events must look at both. `jsonl_events` reads the file (and its rotated predecessors);
`tests.support.oauth.audit_events` reads the table.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types

from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import ToolSpec
from tests.support.mcp_http import PROTOCOL_VERSION

READ_TOOL = "probe_read"


async def _whoami(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=ctx.principal.subject)])


def read_catalog() -> Catalog:
    """One tool, `probe_read`, needing `aml:read`: enough to make allowed and refused calls."""
    tool = ToolSpec(
        name=READ_TOOL,
        description="test tool needing aml:read",
        input_schema={"type": "object", "properties": {}},
        body=_whoami,
        scope="aml:read",
    )
    return Catalog(tools=ToolRegistry([tool]))


def raw_post(
    http: httpx.Client, body: str, *, token: str | None = None, method: str = "tools/call", name: str = "x"
) -> httpx.Response:
    """POST `body` to /mcp byte for byte (JSON text may hold escapes like `\\ud800` that no encoder makes)."""
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
        "mcp-method": method,
        "mcp-name": name,
    }
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return http.post("/mcp", content=body.encode("ascii"), headers=headers)


def call_body(name: str = READ_TOOL, request_id: int = 1) -> str:
    """A `tools/call` body as JSON text, with the 2026-07-28 envelope."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {
                "name": name,
                "arguments": {},
                "_meta": {
                    "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "aml-mcp-tests", "version": "0"},
                },
            },
        }
    )


def jsonl_events(data_dir: Path) -> list[dict[str, Any]]:
    """Every event in `audit.jsonl` and its rotated files, oldest file first. Fails on a bad line."""
    path = data_dir / "audit.jsonl"
    files = sorted(data_dir.glob("audit.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    events: list[dict[str, Any]] = []
    for file in [*files, path]:
        if file.exists():
            events += [json.loads(line) for line in file.read_bytes().decode("ascii").split("\n") if line]
    return events


def wait_until(condition: Callable[[], bool], *, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def event_count(event: dict[str, Any]) -> int:
    """How many refusals a record stands for: its aggregated count, or 1."""
    detail = event.get("detail") or {}
    aggregated = detail.get("aggregated") if isinstance(detail, dict) else None
    return int(aggregated["count"]) if aggregated else 1
