"""Fail closed while the audit trail cannot be written, and recover by itself (F5).

Real faults only: the JSON-lines file is `/dev/full` (every write fails with ENOSPC, as on a full
disk), or the table refuses every insert (a trigger in the real database). While the fault lasts,
`/mcp` answers 503 with a JSON-RPC error and `/readyz` says `audit_unavailable`; the events of the call
made as the fault began are kept, and written once the fault clears, after which calls are
admitted again without a restart. `auth.audit_fail_open` keeps serving instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.audit_trail import call_body, jsonl_events, raw_post, read_catalog, wait_until
from tests.support.oauth import SecuredServer, TestIssuer, audit_events, auth_settings, secured_server


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


def _server(data_dir: Path, issuer: TestIssuer, **auth: Any) -> Any:
    return secured_server(
        data_dir, read_catalog(), issuer=issuer, auth=auth_settings([issuer], **auth), real_socket=True
    )


def _call(server: SecuredServer, jti: str) -> httpx.Response:
    token = server.mint(subject="alice", scope="aml:read", jti=jti)
    return raw_post(server.http, call_body(request_id=7), token=token, name="probe_read")


def _ready(server: SecuredServer) -> httpx.Response:
    return server.http.get("/readyz")


def _assert_refused_while_down(server: SecuredServer) -> None:
    wait_until(lambda: _ready(server).status_code == 503, what="/readyz to report the audit failure")
    assert _ready(server).json() == {"status": "not_ready", "reasons": ["audit_unavailable"]}
    refused = _call(server, "during")
    assert refused.status_code == 503 and refused.headers["retry-after"]
    body = refused.json()
    assert body["id"] == 7 and body["error"]["code"] == -32603 and "audit" in body["error"]["message"]
    anonymous = raw_post(server.http, call_body(), name="probe_read")
    assert anonymous.status_code == 503  # not even a 401: nothing is decided that cannot be recorded
    assert server.http.get("/healthz").status_code == 200  # alive, just not admitting


def test_a_full_disk_under_the_audit_file_refuses_calls_until_it_clears(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    (tmp_path / "audit.jsonl").symlink_to("/dev/full")
    with _server(tmp_path, issuer) as server:
        assert _ready(server).status_code == 200
        assert _call(server, "before").status_code == 200  # its event cannot reach the file
        _assert_refused_while_down(server)
        file_sink = next(s for s in server.served.app.state.audit.stats().sinks if s.name == "JsonLinesSink")
        assert not file_sink.healthy and file_sink.failures >= 1 and file_sink.pending >= 1
        assert "No space left on device" in (file_sink.last_error or "")

        (tmp_path / "audit.jsonl").unlink()  # space again (the path is writable)
        wait_until(lambda: _ready(server).status_code == 200, what="/readyz to recover")
        assert _call(server, "after").status_code == 200
        wait_until(lambda: "after" in {e["token_id"] for e in jsonl_events(tmp_path)}, what="the file")
    in_file = [e["token_id"] for e in jsonl_events(tmp_path) if e["decision"] == "allow"]
    assert in_file == ["before", "after"]  # the event of the fault's first moment was kept, not lost
    assert [e["token_id"] for e in audit_events(tmp_path, decision="allow")] == ["before", "after"]


def test_a_table_that_refuses_inserts_refuses_calls_until_it_accepts_them(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    with _server(tmp_path, issuer, audit_file=False) as server:
        assert _call(server, "first").status_code == 200
        server.wait_for_audit(token_id="first")
        with sqlite3.connect(tmp_path / "aml-mcp.db") as conn:
            conn.execute(
                "CREATE TRIGGER audit_down BEFORE INSERT ON audit_events"
                " BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
            )
        assert _call(server, "before").status_code == 200
        _assert_refused_while_down(server)
        with sqlite3.connect(tmp_path / "aml-mcp.db") as conn:
            conn.execute("DROP TRIGGER audit_down")
        wait_until(lambda: _ready(server).status_code == 200, what="/readyz to recover")
        assert _call(server, "after").status_code == 200
        server.wait_for_audit(token_id="after")
        store = server.served.app.state.audit.stats().sinks[0]
        assert store.healthy and store.failures >= 1 and store.dropped == 0 and store.placeholders == 0
    allowed = [e["token_id"] for e in audit_events(tmp_path, decision="allow")]
    assert allowed == ["first", "before", "after"]


def test_fail_open_keeps_serving_and_still_writes_the_events_later(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    (tmp_path / "audit.jsonl").symlink_to("/dev/full")
    with _server(tmp_path, issuer, audit_fail_open=True) as server:
        assert _call(server, "one").status_code == 200
        audit = server.served.app.state.audit
        wait_until(lambda: audit.unavailable_reason() is not None, what="the failure to be noticed")
        assert _call(server, "two").status_code == 200
        assert _ready(server).status_code == 200
        (tmp_path / "audit.jsonl").unlink()
        wait_until(lambda: audit.unavailable_reason() is None, what="the file to be written again")
    assert [e["token_id"] for e in jsonl_events(tmp_path) if e["decision"] == "allow"] == ["one", "two"]


def test_the_readiness_probe_and_admission_are_clear_when_the_trail_is_writable(
    tmp_path: Path, issuer: TestIssuer
) -> None:
    with _server(tmp_path, issuer) as server:
        assert _ready(server).json() == {"status": "ready"}
        assert _call(server, "ok").status_code == 200
        assert raw_post(server.http, call_body(), name="probe_read").status_code == 401
