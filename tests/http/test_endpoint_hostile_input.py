"""Bodies that are not Unicode text, or nest without bound, over real HTTP with real tokens.

A lone UTF-16 surrogate (`"\\ud800"` in JSON, or its raw UTF-8 bytes) decodes to a Python string
that no later layer can encode: SQLite, the JSON-lines audit file and the schema validator all
raise on it. Before, such a body got a normal 401 and then poisoned the audit batch it joined
(every caller's events in it were lost), a 500 from the gate, or a -32603 with a traceback. Now it
is refused once, at the endpoint, with -32700 — anonymous or not, whichever field holds it — and
the refusal itself is audited with the field escaped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.mcp_http import TASKS_EXTENSION, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server

WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}
SURROGATE = "\ud800"


class _Collector(logging.Handler):
    """Every record the server logs (its loggers and uvicorn's), to assert nothing went wrong."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)

    def problems(self) -> list[str]:
        with self._lock:
            return [
                f"{r.name}: {r.getMessage()}"
                for r in self.records
                if r.levelno >= logging.WARNING or r.exc_info is not None
            ]

    def clear(self) -> None:
        with self._lock:
            self.records.clear()


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("hostile-input")
    # Every refusal on its own record: this module counts them (merging identical anonymous
    # refusals, on by default, has its own tests in tests/audit/).
    auth = auth_settings([issuer], audit_anonymous_window_seconds=0)
    with secured_server(data_dir, fixture_catalog(), issuer=issuer, auth=auth, real_socket=True) as running:
        yield running


@pytest.fixture
def logs(server: SecuredServer) -> Iterator[_Collector]:
    collector = _Collector()
    watched = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    for logger in watched:
        logger.addHandler(collector)
    try:
        yield collector
    finally:
        for logger in watched:
            logger.removeHandler(collector)


@pytest.fixture(scope="module")
def token(server: SecuredServer) -> str:
    return server.mint(scope="aml:read")


def send(server: SecuredServer, body: bytes, *, token: str | None = None, **headers: str) -> httpx.Response:
    """POST raw bytes to /mcp on a fresh connection, with MCP headers that route as `x`."""
    sent = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "x",
        **{name.replace("_", "-"): value for name, value in headers.items()},
    }
    if token is not None:
        sent["authorization"] = f"Bearer {token}"
    return httpx.post(f"{server.url}/mcp", content=body, headers=sent, timeout=15)


def encoded(body: dict[str, Any]) -> bytes:
    """JSON with every non-ASCII character escaped: a lone surrogate becomes `\\ud800` on the wire."""
    return json.dumps(body).encode("ascii")


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return root


# Where a lone surrogate can hide in a request, with the JSON path the refusal names.
PLACES: list[tuple[str, dict[str, Any], str]] = [
    ("method", message(SURROGATE), "$.method"),
    ("tool name", message("tools/call", {"name": SURROGATE, "arguments": {}}), "$.params.name"),
    ("prompt name", message("prompts/get", {"name": "a" + SURROGATE}), "$.params.name"),
    ("resource uri", message("resources/read", {"uri": "test://" + SURROGATE}), "$.params.uri"),
    (
        "task id",
        message("tasks/get", {"taskId": SURROGATE + "abc"}, capabilities=WITH_TASKS),
        "$.params.taskId",
    ),
    (
        "listen task id",
        message("subscriptions/listen", {"notifications": {"taskIds": [SURROGATE]}}, capabilities=WITH_TASKS),
        "$.params.notifications.taskIds[0]",
    ),
    (
        "argument key",
        message("tools/call", {"name": "greet", "arguments": {SURROGATE: 1, "name": "x"}}),
        "$.params.arguments.\\ud800",
    ),
    (
        "argument value",
        message("tools/call", {"name": "greet", "arguments": {"name": "x" + SURROGATE}}),
        "$.params.arguments.name",
    ),
    (
        "answer to an input request",
        message(
            "tools/call",
            {
                "name": "slow_compute",
                "arguments": {"seconds": 0},
                "inputResponses": {"q": {"action": "accept", "content": {"x": SURROGATE}}},
            },
            capabilities=WITH_TASKS,
        ),
        "$.params.inputResponses.q.content.x",
    ),
    ("request id", {**message("tools/list"), "id": SURROGATE}, "$.id"),
]


@pytest.mark.parametrize(("field", "body", "path"), PLACES, ids=[place[0] for place in PLACES])
@pytest.mark.parametrize("with_token", [False, True], ids=["anonymous", "authenticated"])
def test_a_lone_surrogate_anywhere_is_a_parse_error_refused_once_and_audited(
    server: SecuredServer,
    token: str,
    logs: _Collector,
    field: str,
    body: dict[str, Any],
    path: str,
    with_token: bool,
) -> None:
    mark = server.audit_mark()
    response = send(server, encoded(body), token=token if with_token else None)

    assert response.status_code == 400, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()
    assert error["id"] is None
    assert error["error"]["code"] == -32700
    assert "not valid Unicode" in error["error"]["message"] and path in error["error"]["message"]

    refusal = server.wait_for_audit(since=mark, reason="invalid_unicode")
    assert refusal["decision"] == "deny" and refusal["subject"] is None
    assert refusal["detail"] == {"field": path}
    for value in (refusal["method"], refusal["target"]):
        assert value is None or value.isascii()
    # Nothing else about this request reached the trail: no allow, no 401 with the raw field.
    assert [e["reason"] for e in server.audit(since=mark)] == ["invalid_unicode"]
    assert logs.problems() == []


def test_the_escaped_field_is_what_the_trail_shows(server: SecuredServer) -> None:
    mark = server.audit_mark()
    send(server, encoded(message("tools/call", {"name": "a\u2028b" + SURROGATE, "arguments": {}})))
    refusal = server.wait_for_audit(since=mark, reason="invalid_unicode")
    assert refusal["method"] == "tools/call"
    assert refusal["target"] == "a\\u2028b\\ud800"


def test_raw_utf8_encoded_surrogate_bytes_are_refused_the_same_way(server: SecuredServer, token: str) -> None:
    """Python's JSON decoder lets the 3-byte UTF-8 form of a surrogate through as well."""
    raw = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xed\xa0\x80","arguments":{}}}'
    for credential in (None, token):
        response = send(server, raw, token=credential)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == -32700


def test_a_poisoned_request_no_longer_takes_other_callers_events_with_it(
    server: SecuredServer, token: str, logs: _Collector
) -> None:
    """H1's measurement, shrunk: victims' calls interleaved with anonymous poison are all recorded."""
    mark = server.audit_mark()
    poison = encoded(message("tools/call", {"name": SURROGATE, "arguments": {}}))
    victims = 10
    for index in range(victims):
        call = message("tools/call", {"name": "greet", "arguments": {"name": f"victim-{index}"}})
        answer = server.http.post(
            "/mcp",
            content=json.dumps(call),
            headers={**headers_for(call), "authorization": f"Bearer {token}"},
        )
        assert answer.status_code == 200
        assert send(server, poison).status_code == 400

    def recorded() -> tuple[int, int]:
        events = server.audit(since=mark)
        allowed = sum(1 for e in events if e["reason"] == "ok" and e["target"] == "greet")
        refused = sum(1 for e in events if e["reason"] == "invalid_unicode")
        return allowed, refused

    deadline = time.monotonic() + 10
    while recorded() != (victims, victims) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert recorded() == (victims, victims)
    lines = server.audit_file_lines()
    assert all(json.loads(line) for line in lines)  # every line parses: nothing half-written
    assert logs.problems() == []


def test_a_surrogate_pair_is_text_and_is_served(server: SecuredServer, token: str) -> None:
    """An escaped pair (what ASCII-only encoders write for an emoji) is one valid character."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"greet","arguments":{"name":"\\ud83d\\ude00"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}'  # noqa: E501
    response = send(server, body, token=token, mcp_name="greet")
    assert response.status_code == 200, response.text
    assert response.json()["result"]["content"][0]["text"] == "Hello, \U0001f600!"


def test_arguments_nested_500_deep_are_refused_at_the_door(
    server: SecuredServer, token: str, logs: _Collector
) -> None:
    mark = server.audit_mark()
    body = message("tools/call", {"name": "json_schema_2020_12_tool", "arguments": {"extra": _deep(500)}})
    response = send(server, encoded(body), token=token, mcp_name="json_schema_2020_12_tool")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32700 and "nests deeper than 64 levels" in error["message"]
    refusal = server.wait_for_audit(since=mark, reason="nesting_too_deep")
    assert refusal["target"] == "json_schema_2020_12_tool"
    assert refusal["detail"]["field"].startswith("$.params.arguments.extra")
    assert logs.problems() == []


def test_nesting_within_the_limit_is_served(server: SecuredServer, token: str) -> None:
    body = message("tools/call", {"name": "greet", "arguments": {"name": "x", "extra": _deep(40)}})
    response = send(server, encoded(body), token=token, mcp_name="greet")
    assert response.status_code == 200
    assert "result" in response.json()


def test_json_nested_deeper_than_the_decoder_can_go_is_still_a_parse_error(
    server: SecuredServer, token: str
) -> None:
    """200,000 levels: the decoder gives up (RecursionError); the answer stays a clean -32700."""
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    response = send(server, body, token=token, mcp_method="tools/list")
    assert response.status_code in (400, 413)
    assert response.json()["error"]["code"] in (-32700, -32600)
