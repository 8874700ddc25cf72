"""A request that does not speak 2026-07-28 learns how to (`http/versions.py`), in-process.

What handshake-era clients send by default — an `initialize` without the header, or with an old
revision in it — and a request without the header or naming an unknown revision, all get HTTP 400
and -32022 with `data.supported` and `data.requested` (the spec's shape), a message and a
`data.hint` that name 2026-07-28 and the client settings that select it. What the spec answers
otherwise stays: a header/envelope mismatch is -32020, and an `initialize` carrying a modern
envelope is an unknown method (-32601, 404).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.support.mcp_http import PROTOCOL_VERSION, headers_for, message, post

LEGACY_INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "legacy-client", "version": "1.0.0"},
    },
}


def _legacy_headers(header: str | None) -> dict[str, str]:
    """What a handshake-era client sends: no routing headers, and the version header only maybe."""
    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
    if header is not None:
        headers["mcp-protocol-version"] = header
    return headers


def _teaching(response: httpx.Response, *, requested: str, request_id: Any) -> dict[str, Any]:
    assert response.status_code == 400
    body = response.json()
    assert body["id"] == request_id
    error = body["error"]
    assert error["code"] == -32022
    assert error["data"]["supported"] == [PROTOCOL_VERSION]
    assert error["data"]["requested"] == requested
    for text in (error["message"], error["data"]["hint"]):
        assert PROTOCOL_VERSION in text
        assert "versionNegotiation {mode: 'auto'}" in text and "--protocol-era auto" in text
    assert "mcp-session-id" not in response.headers
    return dict(error)


@pytest.mark.parametrize("header", [None, "2025-11-25", "2025-06-18"])
def test_a_legacy_initialize_is_told_which_revision_to_speak(core: httpx.Client, header: str | None) -> None:
    response = core.post("/mcp", json=LEGACY_INITIALIZE, headers=_legacy_headers(header))
    error = _teaching(response, requested=header or "2025-11-25", request_id=0)
    why = "MCP-Protocol-Version header is missing" if header is None else f"{header!r} is not a revision"
    assert why in error["message"]


def test_an_initialize_with_the_modern_header_but_no_envelope_is_handshake_era(core: httpx.Client) -> None:
    response = core.post("/mcp", json=LEGACY_INITIALIZE, headers=_legacy_headers(PROTOCOL_VERSION))
    error = _teaching(response, requested="2025-11-25", request_id=0)
    assert "initialize is a handshake-era request" in error["message"]


def test_an_initialize_with_a_modern_envelope_is_an_unknown_method(core: httpx.Client) -> None:
    response = post(core, message("initialize", request_id=4))
    assert response.status_code == 404
    assert response.json()["error"]["code"] == -32601 and response.json()["id"] == 4


def test_a_request_without_the_header_names_what_its_envelope_asked(core: httpx.Client) -> None:
    response = post(core, message("tools/list", request_id="a"), mcp_protocol_version=None)
    error = _teaching(response, requested=PROTOCOL_VERSION, request_id="a")
    assert "MCP-Protocol-Version header is missing" in error["message"]


def test_a_request_with_neither_header_nor_envelope_requests_nothing(core: httpx.Client) -> None:
    body = {"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}
    _teaching(core.post("/mcp", json=body, headers=_legacy_headers(None)), requested="", request_id=9)


@pytest.mark.parametrize("version", ["v999.0.0", "2024-11-05", "2026-07-29"])
def test_a_revision_we_do_not_serve_is_named_back(core: httpx.Client, version: str) -> None:
    body = message("server/discover", request_id=2)
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = version
    error = _teaching(post(core, body, mcp_protocol_version=version), requested=version, request_id=2)
    assert repr(version) in error["message"]


def test_an_unserved_header_with_a_different_envelope_is_a_mismatch(core: httpx.Client) -> None:
    body = message("tools/list", request_id=6)
    response = post(core, body, mcp_protocol_version="2025-11-25")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32020 and response.json()["id"] == 6


def test_a_modern_header_with_another_envelope_version_stays_a_mismatch(core: httpx.Client) -> None:
    body = message("tools/list", request_id=7)
    body["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
    response = post(core, body)
    assert response.status_code == 400 and response.json()["error"]["code"] == -32020


def test_a_modern_request_is_served(core: httpx.Client) -> None:
    body = message("tools/list", request_id=8)
    response = core.post("/mcp", json=body, headers=headers_for(body))
    assert response.status_code == 200 and "result" in response.json()
