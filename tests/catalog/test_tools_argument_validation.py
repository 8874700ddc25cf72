"""Tool arguments are validated against the tool's input schema before the tool runs."""

from __future__ import annotations

import httpx

from tests.support.mcp_http import message, post


def test_arguments_that_break_the_schema_are_a_tool_error_the_model_can_fix(core: httpx.Client) -> None:
    response = post(core, message("tools/call", {"name": "greet", "arguments": {"name": 42}}))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["isError"] is True
    assert "name" in result["content"][0]["text"] and "string" in result["content"][0]["text"]
