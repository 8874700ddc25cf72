"""The protocol server: discovery, dispatch, the `_meta` envelope, and methods not served at this revision."""

from __future__ import annotations

import httpx
import pytest

from tests.support.mcp_http import PROTOCOL_VERSION, message, post


def test_discover_advertises_this_revision_and_what_is_served(core: httpx.Client) -> None:
    response = post(core, message("server/discover"))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [PROTOCOL_VERSION]
    assert set(result["capabilities"]) >= {"tools", "prompts", "resources", "completions"}
    assert isinstance(result["ttlMs"], int) and result["cacheScope"] in {"public", "private"}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "aml-mcp"


def test_tools_call_answers_with_a_complete_result(core: httpx.Client) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    response = post(core, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]


def test_unknown_tool_is_invalid_params(core: httpx.Client) -> None:
    response = post(core, message("tools/call", {"name": "no_such_tool", "arguments": {}}, request_id="x-7"))
    body = response.json()
    assert body["id"] == "x-7"
    assert body["error"]["code"] == -32602 and "no_such_tool" in body["error"]["message"]


@pytest.mark.parametrize("legacy", [{"ttl": 1000}, "not-an-object", 17, None])
def test_a_legacy_task_param_never_opts_in_and_never_fails_the_call(
    core: httpx.Client, legacy: object
) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "Bo"}, "task": legacy})
    result = post(core, body).json()["result"]
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "Hello, Bo!"


@pytest.mark.parametrize(
    "drop", [None, "io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"]
)
def test_missing_meta_envelope_is_invalid_params(core: httpx.Client, drop: str | None) -> None:
    body = message("server/discover")
    if drop is None:
        del body["params"]["_meta"]
    else:
        del body["params"]["_meta"][drop]
    response = post(core, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602


def test_client_info_is_optional(core: httpx.Client) -> None:
    body = message("tools/list")
    del body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]
    assert post(core, body).status_code == 200


@pytest.mark.parametrize(
    "method",
    [
        "unknown/method",
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "tasks/list",
        "tasks/result",
    ],
)
def test_unknown_and_removed_methods_are_404_method_not_found(core: httpx.Client, method: str) -> None:
    response = post(core, message(method, request_id=9))
    assert response.status_code == 404, method
    assert response.json()["error"]["code"] == -32601 and response.json()["id"] == 9
