"""A storage fault under any handler is the retryable storage error, sent as HTTP 503 with
`Retry-After` (D10): a sync tool whose SQLite file is locked, or whose PostgreSQL connection was
terminated (the driver's error raised inside the tool's own), is answered -32010 with its hint; a
bug in a tool is still the server's fault (-32603, HTTP 200 as the SDK answers it), and a result that
merely mentions the code is never taken for the error."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest

from aml_mcp.app import build_app
from aml_mcp.catalog import Catalog, InvocationContext, ToolRegistry, ToolSpec
from tests.support.asgi import InProcessServer
from tests.support.mcp_http import message, post
from tests.support.settings import open_settings


async def _locked(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    error = sqlite3.OperationalError("database is locked")
    error.sqlite_errorname = "SQLITE_BUSY"  # type: ignore[attr-defined]
    raise error


async def _connection_lost(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    try:
        raise psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    except psycopg.Error as exc:
        raise RuntimeError("the search failed") from exc


async def _bug(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    raise ValueError("a bug in the tool")


async def _mentions(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "ok"}], "structuredContent": {"error": {"code": -32010}}}


def _tool(name: str, body: Any) -> ToolSpec:
    return ToolSpec(name=name, description=name, input_schema={"type": "object"}, body=body)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    tools = [_tool("locked", _locked), _tool("lost", _connection_lost), _tool("bug", _bug)]
    catalog = Catalog(tools=ToolRegistry([*tools, _tool("mentions", _mentions)]))
    settings = open_settings(Path(tmp_path_factory.mktemp("storage-fault-answers")))
    with InProcessServer(build_app(settings, catalog=catalog)) as served, served.client(timeout=10) as http:
        yield http


@pytest.mark.parametrize(("tool", "cause"), [("locked", "database busy"), ("lost", "database unreachable")])
def test_a_storage_fault_under_a_tool_is_a_retryable_503(client: httpx.Client, tool: str, cause: str) -> None:
    response = post(client, message("tools/call", {"name": tool, "arguments": {}}, request_id=41))
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "1" and response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["id"] == 41
    assert body["error"]["code"] == -32010 and f"({cause})" in body["error"]["message"]
    assert body["error"]["data"] == {"reason": "storage_unavailable", "retryable": True, "retryAfterMs": 1000}


def test_a_bug_stays_the_servers_fault_and_a_result_naming_the_code_is_a_result(client: httpx.Client) -> None:
    bug = post(client, message("tools/call", {"name": "bug", "arguments": {}}))
    assert bug.status_code == 200 and "retry-after" not in bug.headers
    assert bug.json()["error"]["code"] == -32603
    mentions = post(client, message("tools/call", {"name": "mentions", "arguments": {}}))
    assert (
        mentions.status_code == 200
        and mentions.json()["result"]["structuredContent"]["error"]["code"] == -32010
    )
