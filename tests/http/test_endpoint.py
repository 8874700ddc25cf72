"""The `/mcp` endpoint's HTTP checks: method, body (bounded, JSON, no batches), routing headers and the
protocol-version header, and streaming a call's progress over SSE."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from tests.support.mcp_http import PROTOCOL_VERSION, headers_for, message, post, sse_messages


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"mcp_method": "prompts/list"}, "method header differs from the body"),
        ({"mcp_method": None}, "method header missing"),
        ({"mcp_method": "TOOLS/LIST"}, "method header is case-sensitive"),
    ],
)
def test_header_mismatch_is_400_with_32020(
    core: httpx.Client, overrides: dict[str, str | None], why: str
) -> None:
    response = post(core, message("tools/list", request_id=11), **overrides)
    assert response.status_code == 400, why
    assert response.json()["error"]["code"] == -32020
    assert response.json()["id"] == 11


@pytest.mark.parametrize("name_header", ["wrong_tool_name", None])
def test_tool_name_header_must_match(core: httpx.Client, name_header: str | None) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    response = post(core, body, mcp_name=name_header)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


def test_header_names_are_case_insensitive(core_tcp: httpx.Client) -> None:
    """Real socket: header names reach the app as the HTTP parser normalises them off the wire."""
    # (Whitespace around values is covered by the conformance suite: h11 will not send it.)
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    headers = headers_for(body)
    headers.pop("mcp-name")
    headers.pop("mcp-method")
    headers["MCP-NAME"] = "greet"
    headers["Mcp-METHOD"] = "tools/call"
    response = core_tcp.post("/mcp", content=json.dumps(body), headers=headers)
    assert response.status_code == 200 and "result" in response.json()


def test_unsupported_protocol_version_names_what_is_supported(core: httpx.Client) -> None:
    body = message("server/discover")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
    response = post(core, body, mcp_protocol_version="v999.0.0")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"]["supported"] == [PROTOCOL_VERSION] and error["data"]["requested"] == "v999.0.0"


def test_a_handshake_era_version_is_refused_not_served_on_a_legacy_path(core: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    response = core.post(
        "/mcp", json=body, headers={**headers_for(body), "mcp-protocol-version": "2025-11-25"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32022
    assert response.json()["id"] == 5
    assert "mcp-session-id" not in response.headers


def test_missing_protocol_version_header_is_an_unsupported_version(core: httpx.Client) -> None:
    response = post(core, message("tools/list", request_id=3), mcp_protocol_version=None)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32022 and response.json()["id"] == 3
    assert response.json()["error"]["data"]["supported"] == [PROTOCOL_VERSION]


def test_malformed_json_is_a_parse_error(core: httpx.Client) -> None:
    response = core.post(
        "/mcp",
        content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
        headers=headers_for({"method": "tools/list"}),
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == -32700 and body["id"] is None


def test_a_batch_is_an_invalid_request(core: httpx.Client) -> None:
    batch = [message("tools/list"), message("tools/list", request_id=2)]
    response = core.post("/mcp", content=json.dumps(batch), headers=headers_for({"method": "tools/list"}))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_oversize_body_is_413_with_a_jsonrpc_error(core: httpx.Client) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x" * (80 * 1024)}})
    response = post(core, body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600 and response.json()["jsonrpc"] == "2.0"


def test_oversize_chunked_body_is_413_too(core_tcp: httpx.Client) -> None:
    """Real socket: a chunked body has no Content-Length, so only the bytes read off the wire count."""

    def chunks() -> Iterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}}'

    response = core_tcp.post("/mcp", content=chunks(), headers=headers_for({"method": "tools/list"}))
    assert response.status_code == 413


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
def test_only_post_is_served_at_this_revision(core: httpx.Client, verb: str) -> None:
    response = core.request(verb, "/mcp", headers={"accept": "text/event-stream"})
    assert response.status_code == 405 and response.headers["allow"] == "POST"


def test_progress_streams_over_sse_before_the_result(core_tcp: httpx.Client) -> None:
    """Real socket: the SSE frames arrive as uvicorn streams them, not as one buffered body."""
    body = message("tools/call", {"name": "test_tool_with_progress", "arguments": {}}, progressToken="p-1")
    with core_tcp.stream("POST", "/mcp", content=json.dumps(body), headers=headers_for(body)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = list(sse_messages(response))
    progress = [f["params"]["progress"] for f in frames if f.get("method") == "notifications/progress"]
    assert progress == [0, 50, 100]
    assert all(f["params"]["progressToken"] == "p-1" for f in frames if "method" in f)
    assert frames[-1]["id"] == 1 and frames[-1]["result"]["resultType"] == "complete"
