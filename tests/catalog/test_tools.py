"""The tool catalog as listed: deterministic order, cache hints, schemas as declared."""

from __future__ import annotations

import httpx

from tests.support.mcp_http import message, post


def test_tools_list_is_deterministic_and_carries_cache_hints(core: httpx.Client) -> None:
    first = post(core, message("tools/list")).json()["result"]
    second = post(core, message("tools/list", request_id=2)).json()["result"]
    names = [tool["name"] for tool in first["tools"]]
    assert names == [tool["name"] for tool in second["tools"]]
    assert names[0] == "test_simple_text"
    assert first["ttlMs"] == 60_000 and first["cacheScope"] == "public"
    schema = next(t for t in first["tools"] if t["name"] == "json_schema_2020_12_tool")["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and "$defs" in schema
