"""Raw line separators and control characters never reach `audit.jsonl` (L9).

A tool name like `"a\\u2028b\\u0085c"` used to be written raw: `str.splitlines()` then saw more
lines than events, cutting one event in two for every tool that splits on Unicode line breaks,
and C1 controls (U+009B is a CSI) reached whoever displayed the file. Every line is ASCII JSON now.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.sinks import JsonLinesSink
from tests.support.audit_trail import jsonl_events, raw_post, read_catalog, wait_until
from tests.support.mcp_http import message
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

HOSTILE = [
    "a\u2028b\u0085c",
    "\u2029para",
    "csi\u009b31m",
    "esc\x1b[2J",
    "nul\x00bell\x07",
    "del\x7f",
    "bidi\u202egnp.exe",
    "\u00e9t\u00e9 \U0001f600",
]
RAW_BREAKS = ["\u2028", "\u2029", "\u0085", "\u009b", "\x1b", "\x00", "\x07", "\x7f", "\u202e"]


def _assert_one_safe_line_per_event(raw: bytes, expected: int) -> None:
    assert raw.isascii(), "every line is ASCII JSON"
    text = raw.decode("ascii")
    assert not any(ch in text for ch in RAW_BREAKS)
    assert len(text.splitlines()) == text.count("\n") == expected


def test_line_separators_and_controls_are_escaped_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog([JsonLinesSink(path)], anonymous_window_seconds=0)
    for value in HOSTILE:
        log.record(AuditEvent(decision=Decision.DENY, reason="no_token", method="tools/call", target=value))
        log.record(
            AuditEvent(decision=Decision.DENY, reason="bad_signature", detail={"unverified": {"sub": value}})
        )
    log.close()
    _assert_one_safe_line_per_event(path.read_bytes(), 2 * len(HOSTILE))
    events = jsonl_events(tmp_path)
    assert [e["target"] for e in events[::2]] == HOSTILE  # escaped, not altered
    assert [e["detail"]["unverified"]["sub"] for e in events[1::2]] == HOSTILE


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with TestIssuer() as issuer, secured_server(tmp_path, read_catalog(), issuer=issuer) as running:
        yield running


def test_an_anonymous_tool_name_with_line_separators_stays_one_line(server: SecuredServer) -> None:
    for n, value in enumerate(HOSTILE):
        response = raw_post(server.http, json.dumps(message("tools/call", {"name": value, "arguments": {}})))
        assert response.status_code == 401, response.text
        token = server.mint(subject="alice", scope="aml:read", jti=f"j{n}")
        allowed = raw_post(
            server.http,
            json.dumps(message("tools/call", {"name": "probe_read"})),
            token=token,
            name="probe_read",
        )
        assert allowed.status_code == 200
    path = server.data_dir / "audit.jsonl"
    wait_until(lambda: path.exists() and path.read_bytes().count(b"\n") >= 2 * len(HOSTILE), what="the trail")
    _assert_one_safe_line_per_event(path.read_bytes(), 2 * len(HOSTILE))
    assert [e["target"] for e in jsonl_events(server.data_dir) if e["reason"] == "no_token"] == HOSTILE
