"""Multi round-trip requests on a plain (synchronous) call: the server ends a round with
`input_required`, the client answers with `on_input` and retries with the echoed `requestState`;
without a way to answer, the client says what was asked."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest

from aml_mcp import Catalog, InvocationContext, ToolRegistry, ToolSpec, elicit_form, request_input
from aml_mcp.client import BearerAuth, InputUnavailable, McpClient
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

NAME_FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


async def greet(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    answer = await request_input(ctx, "name", elicit_form("What is your name?", NAME_FORM))
    name = (answer.get("content") or {}).get("name", "nobody")
    return types.CallToolResult(content=[types.TextContent(text=f"Hello, {name}!")])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    greeter = ToolSpec(name="greet", description="Greets.", input_schema={"type": "object"}, body=greet)
    catalog = Catalog(tools=ToolRegistry([greeter]))
    data_dir: Path = tmp_path_factory.mktemp("client-mrtr")
    with secured_server(data_dir, catalog, issuer=issuer, real_socket=True) as running:
        yield running


def _call(server: SecuredServer, on_input: Any) -> types.CallToolResult:
    async def main() -> types.CallToolResult:
        auth = BearerAuth(server.mint(tenant="bank-a", scope=""))
        async with McpClient(f"{server.url}/mcp", auth=auth, on_input=on_input) as client:
            outcome = await client.call_tool("greet", {})
            assert isinstance(outcome, types.CallToolResult)
            return outcome

    return anyio.run(main)


def test_the_answer_completes_the_call(server: SecuredServer) -> None:
    asked: list[tuple[str, Mapping[str, Any]]] = []

    async def on_input(key: str, request: Mapping[str, Any]) -> Mapping[str, Any]:
        asked.append((key, request))
        return {"action": "accept", "content": {"name": "Ada"}}

    result = _call(server, on_input)
    assert result.content[0].text == "Hello, Ada!"  # type: ignore[union-attr]
    assert [key for key, _ in asked] == ["name"]
    assert asked[0][1]["method"] == "elicitation/create"
    assert asked[0][1]["params"]["message"] == "What is your name?"


def test_without_a_way_to_answer_the_request_is_reported(server: SecuredServer) -> None:
    with pytest.raises(InputUnavailable) as missing:
        _call(server, None)
    assert list(missing.value.requests) == ["name"]
    assert "What is your name?" in str(missing.value) and "fields: name" in str(missing.value)
