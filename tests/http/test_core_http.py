"""The stateless core over real HTTP on 127.0.0.1: discovery, dispatch and every refusal the HTTP
layer and the SDK entry owe a bad request."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.live_server import LiveServer
from tests.support.mcp_http import PROTOCOL_VERSION, headers_for, message, post, sse_messages
from tests.support.settings import open_settings


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    data_dir: Path = tmp_path_factory.mktemp("core")
    settings = open_settings(data_dir, max_body_bytes=64 * 1024)
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        yield http


def test_discover_advertises_this_revision_and_what_is_served(client: httpx.Client) -> None:
    response = post(client, message("server/discover"))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == [PROTOCOL_VERSION]
    assert set(result["capabilities"]) >= {"tools", "prompts", "resources", "completions"}
    assert isinstance(result["ttlMs"], int) and result["cacheScope"] in {"public", "private"}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "aml-mcp"


def test_tools_list_is_deterministic_and_carries_cache_hints(client: httpx.Client) -> None:
    first = post(client, message("tools/list")).json()["result"]
    second = post(client, message("tools/list", request_id=2)).json()["result"]
    names = [tool["name"] for tool in first["tools"]]
    assert names == [tool["name"] for tool in second["tools"]]
    assert names[0] == "test_simple_text"
    assert first["ttlMs"] == 60_000 and first["cacheScope"] == "public"
    schema = next(t for t in first["tools"] if t["name"] == "json_schema_2020_12_tool")["inputSchema"]
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema" and "$defs" in schema


def test_tools_call_answers_with_a_complete_result(client: httpx.Client) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "Ada"}})
    response = post(client, body)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    result = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["content"] == [{"type": "text", "text": "Hello, Ada!"}]


def test_arguments_that_break_the_schema_are_a_tool_error_the_model_can_fix(client: httpx.Client) -> None:
    response = post(client, message("tools/call", {"name": "greet", "arguments": {"name": 42}}))
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["isError"] is True
    assert "name" in result["content"][0]["text"] and "string" in result["content"][0]["text"]


def test_unknown_tool_is_invalid_params(client: httpx.Client) -> None:
    response = post(
        client, message("tools/call", {"name": "no_such_tool", "arguments": {}}, request_id="x-7")
    )
    body = response.json()
    assert body["id"] == "x-7"
    assert body["error"]["code"] == -32602 and "no_such_tool" in body["error"]["message"]


@pytest.mark.parametrize("legacy", [{"ttl": 1000}, "not-an-object", 17, None])
def test_a_legacy_task_param_never_opts_in_and_never_fails_the_call(
    client: httpx.Client, legacy: object
) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "Bo"}, "task": legacy})
    result = post(client, body).json()["result"]
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "Hello, Bo!"


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ({"mcp_method": "prompts/list"}, "method header differs from the body"),
        ({"mcp_method": None}, "method header missing"),
        ({"mcp_method": "TOOLS/LIST"}, "method header is case-sensitive"),
    ],
)
def test_header_mismatch_is_400_with_32020(
    client: httpx.Client, overrides: dict[str, str | None], why: str
) -> None:
    response = post(client, message("tools/list", request_id=11), **overrides)
    assert response.status_code == 400, why
    assert response.json()["error"]["code"] == -32020
    assert response.json()["id"] == 11


@pytest.mark.parametrize("name_header", ["wrong_tool_name", None])
def test_tool_name_header_must_match(client: httpx.Client, name_header: str | None) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    response = post(client, body, mcp_name=name_header)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020


def test_header_names_are_case_insensitive(client: httpx.Client) -> None:
    # (Whitespace around values is covered by the conformance suite: h11 will not send it.)
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x"}})
    headers = headers_for(body)
    headers.pop("mcp-name")
    headers.pop("mcp-method")
    headers["MCP-NAME"] = "greet"
    headers["Mcp-METHOD"] = "tools/call"
    response = client.post("/mcp", content=json.dumps(body), headers=headers)
    assert response.status_code == 200 and "result" in response.json()


def test_unsupported_protocol_version_names_what_is_supported(client: httpx.Client) -> None:
    body = message("server/discover")
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
    response = post(client, body, mcp_protocol_version="v999.0.0")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": [PROTOCOL_VERSION], "requested": "v999.0.0"}


def test_a_handshake_era_version_is_refused_not_served_on_a_legacy_path(client: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": 5, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}
    response = client.post(
        "/mcp", json=body, headers={**headers_for(body), "mcp-protocol-version": "2025-11-25"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32022
    assert response.json()["id"] == 5
    assert "mcp-session-id" not in response.headers


def test_missing_protocol_version_header_is_a_header_error(client: httpx.Client) -> None:
    response = post(client, message("tools/list", request_id=3), mcp_protocol_version=None)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020 and response.json()["id"] == 3


@pytest.mark.parametrize(
    "drop", [None, "io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"]
)
def test_missing_meta_envelope_is_invalid_params(client: httpx.Client, drop: str | None) -> None:
    body = message("server/discover")
    if drop is None:
        del body["params"]["_meta"]
    else:
        del body["params"]["_meta"][drop]
    response = post(client, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602


def test_client_info_is_optional(client: httpx.Client) -> None:
    body = message("tools/list")
    del body["params"]["_meta"]["io.modelcontextprotocol/clientInfo"]
    assert post(client, body).status_code == 200


def test_malformed_json_is_a_parse_error(client: httpx.Client) -> None:
    response = client.post(
        "/mcp",
        content=b'{"jsonrpc": "2.0", "id": 1, "method": ',
        headers=headers_for({"method": "tools/list"}),
    )
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == -32700 and body["id"] is None


def test_a_batch_is_an_invalid_request(client: httpx.Client) -> None:
    batch = [message("tools/list"), message("tools/list", request_id=2)]
    response = client.post("/mcp", content=json.dumps(batch), headers=headers_for({"method": "tools/list"}))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32600


def test_oversize_body_is_413_with_a_jsonrpc_error(client: httpx.Client) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x" * (80 * 1024)}})
    response = post(client, body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == -32600 and response.json()["jsonrpc"] == "2.0"


def test_oversize_chunked_body_is_413_too(client: httpx.Client) -> None:
    def chunks() -> Iterator[bytes]:
        yield b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"'
        for _ in range(100):
            yield b"x" * 1024
        yield b'"}}'

    response = client.post("/mcp", content=chunks(), headers=headers_for({"method": "tools/list"}))
    assert response.status_code == 413


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
def test_unknown_and_removed_methods_are_404_method_not_found(client: httpx.Client, method: str) -> None:
    response = post(client, message(method, request_id=9))
    assert response.status_code == 404, method
    assert response.json()["error"]["code"] == -32601 and response.json()["id"] == 9


@pytest.mark.parametrize("verb", ["GET", "DELETE", "PUT"])
def test_only_post_is_served_at_this_revision(client: httpx.Client, verb: str) -> None:
    response = client.request(verb, "/mcp", headers={"accept": "text/event-stream"})
    assert response.status_code == 405 and response.headers["allow"] == "POST"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example.com"}, 421),
        ({"origin": "http://evil.example.com"}, 403),
        ({"host": "evil.example.com", "origin": "http://evil.example.com"}, 421),
    ],
)
def test_disallowed_host_or_origin_is_refused(
    client: httpx.Client, headers: dict[str, str], status: int
) -> None:
    body = message("server/discover")
    response = client.post("/mcp", content=json.dumps(body), headers={**headers_for(body), **headers})
    assert response.status_code == status
    assert response.json()["error"]["code"] == -32600
    health = client.get("/healthz", headers=headers)
    assert health.status_code == status


def test_loopback_origin_with_any_port_is_accepted(client: httpx.Client, server: LiveServer) -> None:
    body = message("server/discover")
    for origin in (f"http://localhost:{server.port}", "http://127.0.0.1:1234"):
        response = client.post(
            "/mcp", content=json.dumps(body), headers={**headers_for(body), "origin": origin}
        )
        assert response.status_code == 200


def test_progress_streams_over_sse_before_the_result(client: httpx.Client) -> None:
    body = message("tools/call", {"name": "test_tool_with_progress", "arguments": {}}, progressToken="p-1")
    with client.stream("POST", "/mcp", content=json.dumps(body), headers=headers_for(body)) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        frames = list(sse_messages(response))
    progress = [f["params"]["progress"] for f in frames if f.get("method") == "notifications/progress"]
    assert progress == [0, 50, 100]
    assert all(f["params"]["progressToken"] == "p-1" for f in frames if "method" in f)
    assert frames[-1]["id"] == 1 and frames[-1]["result"]["resultType"] == "complete"


def test_multi_round_trip_carries_sealed_state_and_refuses_tampering(client: httpx.Client) -> None:
    call = {"name": "test_input_required_result_multi_round", "arguments": {}}
    first = post(client, message("tools/call", call)).json()["result"]
    assert first["resultType"] == "input_required" and set(first["inputRequests"]) == {"step1"}
    answer = {"action": "accept", "content": {"name": "Ada"}}
    second = post(
        client,
        message(
            "tools/call", {**call, "inputResponses": {"step1": answer}, "requestState": first["requestState"]}
        ),
    ).json()["result"]
    assert set(second["inputRequests"]) == {"step2"} and second["requestState"] != first["requestState"]
    tampered = post(
        client,
        message(
            "tools/call",
            {**call, "inputResponses": {"step2": answer}, "requestState": second["requestState"] + "x"},
        ),
    ).json()
    assert tampered["error"]["code"] == -32602
    colour = {"action": "accept", "content": {"color": "teal"}}
    done = post(
        client,
        message(
            "tools/call",
            {**call, "inputResponses": {"step2": colour}, "requestState": second["requestState"]},
        ),
    ).json()["result"]
    assert done["resultType"] == "complete" and done["content"][0]["text"] == "Ada likes teal."


def test_a_malformed_input_response_is_asked_again_not_accepted(client: httpx.Client) -> None:
    call = {
        "name": "test_input_required_result_elicitation",
        "arguments": {},
        "inputResponses": {"user_name": "12345"},
    }
    response = post(client, message("tools/call", call))
    assert response.json().get("result", {}).get("resultType") != "complete"


def test_listen_acknowledges_first_and_delivers_only_what_was_asked(
    client: httpx.Client, server: LiveServer
) -> None:
    listen = message(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id="sub-1"
    )
    with (
        httpx.Client(base_url=server.url, timeout=10) as other,
        client.stream("POST", "/mcp", content=json.dumps(listen), headers=headers_for(listen)) as stream,
    ):
        lines = stream.iter_lines()
        frames: list[dict[str, object]] = []
        for line in lines:
            if line.startswith("data:"):
                frames.append(json.loads(line[5:]))
                break
        trigger = message("tools/call", {"name": "test_trigger_tool_change", "arguments": {}}, request_id=2)
        assert post(other, trigger).status_code == 200
        for line in lines:
            if line.startswith("data:"):
                frames.append(json.loads(line[5:]))
                break
    ack, changed = frames
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"] == {  # type: ignore[comparison-overlap]
        "notifications": {"toolsListChanged": True},
        "_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"},
    }
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"  # type: ignore[index]


@pytest.mark.parametrize(
    "notifications",
    [
        ["toolsListChanged"],
        {"toolsListChanged": True, "madeUp": True},
        {"toolsListChanged": "yes"},
        {"resourceSubscriptions": "x"},
    ],
)
def test_listen_refuses_malformed_filters(client: httpx.Client, notifications: object) -> None:
    listen = message("subscriptions/listen", {"notifications": notifications}, request_id=4)
    response = post(client, listen)
    assert response.json()["error"]["code"] == -32602


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}
