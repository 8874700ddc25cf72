"""Look-alike identities are refused at the gate and audited (review 2, I5).

The review's reproduction: a token signed by the trusted issuer with `sub` = `car\\u202eol\\u200b`
was accepted (200): only characters below U+0020 were refused, so a bidi override, a zero-width
space or a C1 control in a subject, tenant or client id reached the audit trail and the lab's
tables looking like somebody else's name. Now such a token is a 401 `invalid_token` that names the
claim and the character, audited as `unsafe_identity` with the value escaped, over real HTTP
(uvicorn on 127.0.0.1) with real signed JWTs and real introspection answers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server

BIDI_AND_INVISIBLE = [
    "\u202a",
    "\u202b",
    "\u202c",
    "\u202d",
    "\u202e",
    "\u2066",
    "\u2067",
    "\u2068",
    "\u2069",
    "\u200e",
    "\u200f",
    "\u061c",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\ufeff",
    "\u00ad",
]
CONTROLS = ["\x00", "\x01", "\x1b", "\x7f", "\x85", "\x9b", "\u2028", "\u2029"]


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("unsafe-identity")
    auth = auth_settings([issuer], introspection=issuer.introspection_settings)
    with secured_server(data_dir, fixture_catalog(), issuer=issuer, auth=auth, real_socket=True) as running:
        yield running


def refused(
    server: SecuredServer, token: str, claim: str, escaped_value: str, code_point: str
) -> dict[str, Any]:
    """Sends `tools/list` with `token`: a 401 naming `claim` and the character, and its audit record."""
    mark = server.audit_mark()
    response = server.post("tools/list", token=token, request_id=7)
    assert response.status_code == 401, response.text
    challenge = response.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    body = response.json()
    assert body["id"] == 7 and "result" not in body
    description = body["error"]["data"]["error_description"]
    assert f"'{claim}'" in description and f"(U+{code_point})" in description, description
    assert description.isascii()  # the refusal names the character, never echoes it
    event = server.wait_for_audit(since=mark, decision="deny", reason="unsafe_identity")
    assert event["method"] == "tools/list"
    assert event["subject"] is None and event["tenant"] is None  # never recorded as a principal
    assert event["detail"]["claim"] == {"name": claim, "value": escaped_value}
    return event


def test_the_reviews_subject_with_a_bidi_override_and_a_zero_width_space_is_refused(
    server: SecuredServer,
) -> None:
    token = server.mint(subject="car\u202eol\u200b", tenant="bank-a", client_id="lab")
    event = refused(server, token, "sub", "car\\u202eol\\u200b", "202E")
    assert event["detail"]["unverified"]["sub"] == "car\\u202eol\\u200b"
    lines = server.audit_file_lines()
    assert all("\u202e" not in line and "\u200b" not in line for line in lines)
    assert any("car\\\\u202eol" in line for line in lines)  # escaped once more by JSON
    assert all(json.loads(line) for line in lines)


def test_a_tenant_with_a_zero_width_space_is_refused(server: SecuredServer) -> None:
    token = server.mint(subject="alice", tenant="bank-a\u200b")
    refused(server, token, "tenant", "bank-a\\u200b", "200B")


def test_a_client_id_with_a_c1_control_is_refused(server: SecuredServer) -> None:
    token = server.mint(subject="alice", client_id="lab\x85")
    refused(server, token, "client_id", "lab\\x85", "0085")


@pytest.mark.parametrize("character", BIDI_AND_INVISIBLE + CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_bidi_invisible_and_control_character_is_refused_in_a_subject(
    server: SecuredServer, character: str
) -> None:
    token = server.mint(subject=f"mallory{character}")
    value = f"mallory{character}".encode("unicode_escape").decode("ascii")
    refused(server, token, "sub", value, f"{ord(character):04X}")


def test_a_scope_with_a_bidi_override_refuses_the_token(server: SecuredServer) -> None:
    token = server.mint(subject="alice", scope="aml:read \u202eda:lma")
    refused(server, token, "scope", "\\u202eda:lma", "202E")


def test_an_introspection_answer_with_a_look_alike_subject_is_refused_the_same_way(
    server: SecuredServer, issuer: TestIssuer
) -> None:
    token = issuer.opaque(audience=server.resource, subject="car\u202eol")
    refused(server, token, "sub", "car\\u202eol", "202E")


def test_names_in_any_script_are_still_accepted(server: SecuredServer, issuer: TestIssuer) -> None:
    for subject, tenant in (
        ("zoë", "bank-a"),
        ("José Müller", "banco-ñ"),
        ("山田", "銀行"),
        ("ali\u2010ce", "b"),
    ):
        mark = server.audit_mark()
        response = server.post("tools/list", token=server.mint(subject=subject, tenant=tenant))
        assert response.status_code == 200, response.text
        event = server.wait_for_audit(since=mark, decision="allow", method="tools/list")
        assert (event["subject"], event["tenant"]) == (subject, tenant)
    assert (
        server.post("tools/list", token=issuer.opaque(audience=server.resource, subject="zoë")).status_code
        == 200
    )
