"""Tokens that used to crash the gate, over real HTTP with real signed JWTs and real introspection.

Before, a JWT signed by the trusted issuer whose `exp` (or `iat`) was a 400-digit integer made
`math.isfinite` overflow: a plain-text 500, a traceback, and no audit record of the decision.
The same for an introspection answer carrying such an `exp`. A refused token's *unverified*
claims were copied raw into the audit trail, so a lone surrogate in its `sub` broke the JSON-lines
sink for everybody's batch; a *verified* one carrying a surrogate got through the gate.
Now each is a 401 `invalid_token` with a JSON-RPC body, audited, and logged in one line.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server

HUGE = 10**400


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)

    def tracebacks(self) -> list[str]:
        with self._lock:
            return [
                r.getMessage() for r in self.records if r.exc_info is not None or r.levelno >= logging.ERROR
            ]


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("malformed-tokens")
    auth = auth_settings([issuer], introspection=issuer.introspection_settings)
    with secured_server(data_dir, fixture_catalog(), issuer=issuer, auth=auth) as running:
        yield running


@pytest.fixture
def logs(server: SecuredServer) -> Iterator[_Records]:
    handler = _Records()
    watched = [logging.getLogger(), logging.getLogger("uvicorn"), logging.getLogger("uvicorn.error")]
    for logger in watched:
        logger.addHandler(handler)
    try:
        yield handler
    finally:
        for logger in watched:
            logger.removeHandler(handler)


def _refused_as_malformed(server: SecuredServer, token: str, logs: _Records) -> dict[str, object]:
    mark = server.audit_mark()
    response = server.post("tools/list", token=token)
    assert response.status_code == 401, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["data"]["error"] == "invalid_token"
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    event = server.wait_for_audit(since=mark, reason="malformed_token")
    assert event["decision"] == "deny" and event["method"] == "tools/list"
    assert logs.tracebacks() == []
    return event


@pytest.mark.parametrize("claim", ["exp", "iat", "nbf"])
def test_a_signed_jwt_with_a_400_digit_time_claim_is_a_malformed_token(
    server: SecuredServer, claim: str, logs: _Records
) -> None:
    _refused_as_malformed(server, server.mint(**{claim: HUGE}), logs)


def test_an_introspection_answer_with_a_400_digit_exp_is_a_malformed_token(
    server: SecuredServer, issuer: TestIssuer, logs: _Records
) -> None:
    token = issuer.opaque(audience=server.resource, exp=HUGE)
    _refused_as_malformed(server, token, logs)


def test_a_verified_identity_that_is_not_unicode_text_is_refused(
    server: SecuredServer, logs: _Records
) -> None:
    for claims in ({"subject": "\ud800alice"}, {"tenant": "bank-\udfff"}, {"client_id": "c\ud83d"}):
        event = _refused_as_malformed(server, server.mint(**claims), logs)
        assert event["subject"] is None  # the identity was never trusted, so never recorded as one


def test_a_refused_tokens_unverified_claims_are_escaped_in_the_trail(
    server: SecuredServer, issuer: TestIssuer, logs: _Records
) -> None:
    unpublished = issuer.add_key(publish=False)
    token = server.mint(kid=unpublished, subject="\ud800mallory\u2028", client_id="\x85c")
    mark = server.audit_mark()
    response = server.post("tools/list", token=token)
    assert response.status_code == 401
    event = server.wait_for_audit(since=mark, decision="deny")
    unverified = event["detail"]["unverified"]
    assert unverified["sub"] == "\\ud800mallory\\u2028"
    assert unverified["client_id"] == "\\x85c"
    lines = server.audit_file_lines()
    assert any("mallory" in line for line in lines)
    assert all(json.loads(line) for line in lines)
    assert logs.tracebacks() == []


def test_ordinary_tokens_are_still_accepted(server: SecuredServer, issuer: TestIssuer) -> None:
    assert server.post("tools/list", token=server.mint(subject="zoë")).status_code == 200
    assert server.post("tools/list", token=issuer.opaque(audience=server.resource)).status_code == 200
