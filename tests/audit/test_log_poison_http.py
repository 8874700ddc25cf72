"""Over real HTTP: no anonymous request can take other callers' events out of the audit trail.

The attack: a request with no (or a refused) token whose method, tool name, resource URI, task id
or unverified claims hold a lone UTF-16 surrogate (`"\\ud800"` in the JSON text). It is answered
4xx like any refusal, and its audit event used to make the writer drop every event of its flush
window — from both the table and `audit.jsonl`, whoever made them. Here such requests are
interleaved with other users' allowed calls, and every one of those calls must be in both copies.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest

from tests.support.audit_trail import call_body, jsonl_events, raw_post, read_catalog, wait_until
from tests.support.mcp_http import message
from tests.support.oauth import SecuredServer, TestIssuer, audit_events, secured_server

USERS = [("alice", "bank-a"), ("bob", "bank-b"), ("carol", "bank-a")]
LONE = "@LONE@"
"""Stands for a lone-surrogate escape in a body: replaced in the JSON *text*, which no encoder writes."""


def _body(method: str, params: dict[str, Any]) -> str:
    text = json.dumps(message(method, params))
    return text.replace(LONE, "\\ud800")


def _poison_bodies(n: int) -> list[tuple[str, str]]:
    """(mcp-method header, body): every field the gate copies into the trail, holding a lone surrogate."""
    return [
        ("tools/call", _body("tools/call", {"name": f"{LONE}{n}", "arguments": {}})),
        ("resources/read", _body("resources/read", {"uri": f"{LONE}{n}"})),
        ("tasks/get", _body("tasks/get", {"taskId": f"{LONE}{n}"})),
        ("x", _body(f"{LONE}x{n}", {})),
    ]


def _claims_with_surrogates(issuer: TestIssuer, n: int) -> str:
    """A JWT that fails verification (unknown key) whose unverified claims hold lone surrogates."""
    return jwt.encode(
        {"iss": f"\ud800iss{n}", "sub": f"\udbffsub{n}", "aud": ["\udc00"], "jti": "\ud800", "exp": 1},
        "k" * 32,
        algorithm="HS256",
    )


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with TestIssuer() as issuer, secured_server(tmp_path, read_catalog(), issuer=issuer) as running:
        yield running


def test_surrogate_requests_do_not_erase_other_users_events(server: SecuredServer) -> None:
    assert server.issuer is not None
    expected: list[str] = []
    for round_ in range(12):
        for subject, tenant in USERS:
            jti = f"{subject}-{round_}-{secrets.token_hex(4)}"
            token = server.mint(subject=subject, tenant=tenant, scope="aml:read", jti=jti)
            allowed = raw_post(server.http, call_body(), token=token, name="probe_read")
            assert allowed.status_code == 200, allowed.text
            expected.append(jti)
            for header_method, body in _poison_bodies(round_):
                refused = raw_post(server.http, body, method=header_method)
                assert 400 <= refused.status_code < 500, refused.text
            bad_token = _claims_with_surrogates(server.issuer, round_)
            refused = raw_post(server.http, call_body(), token=bad_token, name="probe_read")
            assert refused.status_code == 401, refused.text

    data_dir = server.data_dir

    def in_table() -> set[str]:
        return {e["token_id"] for e in audit_events(data_dir, decision="allow")}

    def in_file() -> set[str]:
        return {e["token_id"] for e in jsonl_events(data_dir) if e["decision"] == "allow"}

    with contextlib.suppress(AssertionError):  # a lost event never arrives: say which below
        wait_until(lambda: in_table() >= set(expected) and in_file() >= set(expected), timeout=5)
    assert in_table() >= set(expected), f"missing from the table: {set(expected) - in_table()}"
    assert in_file() >= set(expected), f"missing from audit.jsonl: {set(expected) - in_file()}"

    # The hostile requests are in the trail too, with the surrogate shown as an escape.
    targets = {e["target"] for e in audit_events(data_dir, decision="deny")}
    assert "\\ud8000" in targets and "\\ud800x0" in {e["method"] for e in audit_events(data_dir)}
    raw = (data_dir / "audit.jsonl").read_bytes()
    assert raw.isascii()
    unverified = [
        e["detail"]["unverified"]
        for e in jsonl_events(data_dir)
        if e["detail"] and "unverified" in e["detail"]
    ]
    assert unverified and unverified[0]["sub"].startswith("\\udbff")
    assert json.loads(json.dumps(unverified[0]))  # plain JSON all the way down
