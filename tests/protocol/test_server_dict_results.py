"""A tool body may return its result as a plain dict (the form a task body may use too): a
synchronous call answers it as the same well-formed result, and a dict that is not a tool result
is the server's fault (-32603 with a clear message), never passed to the client as is."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.catalog import Catalog, InvocationContext, ToolRegistry, ToolSpec
from tests.support.asgi import InProcessServer
from tests.support.mcp_http import message, post
from tests.support.settings import open_settings


async def _plain(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": "plain dict"}], "structuredContent": {"n": 1}}


async def _broken(arguments: dict[str, Any], ctx: InvocationContext) -> dict[str, Any]:
    return {"content": "not a list"}


def _tool(name: str, body: Any) -> ToolSpec:
    return ToolSpec(name=name, description=name, input_schema={"type": "object"}, body=body)


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    catalog = Catalog(tools=ToolRegistry([_tool("plain", _plain), _tool("broken", _broken)]))
    settings = open_settings(Path(tmp_path_factory.mktemp("dict-results")))
    with InProcessServer(build_app(settings, catalog=catalog)) as served, served.client(timeout=10) as http:
        yield http


def test_a_dict_result_is_answered_as_a_tool_result(client: httpx.Client) -> None:
    response = post(client, message("tools/call", {"name": "plain", "arguments": {}}))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "plain dict"}]
    assert result["structuredContent"] == {"n": 1}


def test_a_dict_that_is_no_tool_result_is_the_servers_fault(client: httpx.Client) -> None:
    response = post(client, message("tools/call", {"name": "broken", "arguments": {}}))
    error = response.json()["error"]
    assert error["code"] == -32603
    assert error["message"] == "Tool returned an invalid result"
