"""A replay that revokes a grant family revokes the access tokens minted from it too (finding I6).

Over real HTTP, on the SQLite data directory: an access token obtained by the code flow works;
the code is presented again (a replay, RFC 6749 §4.1.2); from then on the token is refused (401,
`invalid_token`, audited as `revoked_token`) within a second. The same holds for every access
token of a family whose rotated-out refresh token is reused (RFC 9700 §4.14.2), and for nothing
else: another grant's token keeps working. Two replicas on PostgreSQL are in
`test_replicas_on_postgres.py`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.devauth.revocations import NOTE
from tests.support.dev_issuer import approved_code, dev_issuer_server, redeem_code, refresh
from tests.support.oauth import SecuredServer
from tests.support.waiting import eventually

PROBE = {"name": "probe_read", "arguments": {}}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path) as running:
        yield running


def _status(server: SecuredServer, token: str) -> int:
    return server.post("tools/call", PROBE, token=token).status_code


def _refused_within_a_second(server: SecuredServer, token: str) -> httpx.Response:
    eventually(lambda: _status(server, token) == 401, timeout=1.0, what="the access token to be refused")
    answer = server.post("tools/call", PROBE, token=token)
    assert answer.status_code == 401
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    return answer


def _jti(token: str) -> str:
    payload = token.split(".")[1]
    return str(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))["jti"])


def _tokens(
    http: httpx.Client, server: SecuredServer, user: str = "alice"
) -> tuple[dict[str, Any], str, str]:
    code, verifier = approved_code(server, user=user)
    granted = redeem_code(http, server, code, verifier)
    assert granted.status_code == 200, granted.text
    return dict(granted.json()), code, verifier


def test_replaying_a_code_revokes_the_access_token_it_gave(server: SecuredServer) -> None:
    with httpx.Client(timeout=15) as http:
        tokens, code, verifier = _tokens(http, server)
        other, _, _ = _tokens(http, server, user="bob")
        access = tokens["access_token"]
        assert _status(server, access) == 200
        mark = server.audit_mark()
        replayed = redeem_code(http, server, code, verifier)
        assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
        _refused_within_a_second(server, access)
        server.wait_for_audit(since=mark, decision="deny", reason="revoked_token", token_id=_jti(access))
        # The family's refresh token is dead as before; another grant is untouched.
        assert refresh(http, server, tokens["refresh_token"]).status_code == 400
        assert _status(server, other["access_token"]) == 200


def test_reusing_a_rotated_refresh_token_revokes_every_access_token_of_the_family(
    server: SecuredServer,
) -> None:
    with httpx.Client(timeout=15) as http:
        first, _, _ = _tokens(http, server)
        rotated = refresh(http, server, first["refresh_token"])
        assert rotated.status_code == 200, rotated.text
        second = rotated.json()
        assert (
            _status(server, first["access_token"]) == 200 and _status(server, second["access_token"]) == 200
        )
        reused = refresh(http, server, first["refresh_token"])
        assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
        for token in (first["access_token"], second["access_token"]):
            _refused_within_a_second(server, token)
        assert refresh(http, server, second["refresh_token"]).status_code == 400


def test_the_revocations_are_listed_with_their_reason(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with httpx.Client(timeout=15) as http:
        tokens, code, verifier = _tokens(http, server)
        assert redeem_code(http, server, code, verifier).status_code == 400
    assert cli_main(["revoke", "--list", "--data-dir", str(server.data_dir)]) == 0
    listed = capsys.readouterr().out
    assert _jti(tokens["access_token"]) in listed and NOTE in listed
