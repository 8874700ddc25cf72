"""The bearer gate over HTTP (in-process): every way a token can be wrong, each refused with the right
status, `WWW-Authenticate` challenge and audit record (real signed JWTs, a real JWKS over HTTP)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from aml_mcp.cli import main as cli_main
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.scoped_catalog import SCOPED_TOOLS, scoped_catalog
from tests.support.waiting import eventually

METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("gate")
    with secured_server(data_dir, scoped_catalog(), issuer=issuer) as running:
        yield running


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unsigned(claims: dict[str, Any]) -> str:
    header = _b64(json.dumps({"alg": "none", "typ": "at+jwt"}).encode())
    return f"{header}.{_b64(json.dumps(claims).encode())}."


def _hs256_with_public_key(issuer: TestIssuer, claims: dict[str, Any]) -> str:
    """The classic key-confusion forgery: HMAC keyed with the issuer's *public* key."""
    key = issuer.keys[issuer.signing_kid]
    public_pem = key.private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    header = _b64(json.dumps({"alg": "HS256", "typ": "at+jwt", "kid": key.kid}).encode())
    body = _b64(json.dumps(claims).encode())
    signature = hmac.new(public_pem, f"{header}.{body}".encode(), hashlib.sha256).digest()
    return f"{header}.{body}.{_b64(signature)}"


def _tampered(token: str) -> str:
    """Same header and signature, payload changed (tenant swapped): the signature no longer matches."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["tenant"] = "bank-b"
    return f"{header}.{_b64(json.dumps(claims).encode())}.{signature}"


def _with_header(token: str, **fields: Any) -> str:
    """The token with header fields changed (its signature no longer matters: the header is refused first)."""
    header, payload, signature = token.split(".")
    values = {**json.loads(base64.urlsafe_b64decode(header + "==")), **fields}
    return f"{_b64(json.dumps(values).encode())}.{payload}.{signature}"


def _other_issuer_token(server: SecuredServer) -> str:
    with TestIssuer() as stranger:
        return stranger.mint(audience=server.resource)


@dataclass(frozen=True)
class Case:
    name: str
    token: Callable[[SecuredServer, TestIssuer], str | None]
    reason: str
    status: int = 401
    error: str | None = "invalid_token"
    query_token: bool = False


NOW = int(time.time())
_NOT_AN_OBJECT = ".".join([_b64(b'{"alg":"RS256","typ":"at+jwt"}'), _b64(b"[1]"), "c2ln"])

CASES = [
    Case("no token", lambda s, i: None, "no_token", error=None),
    Case("alg none", lambda s, i: _unsigned(i.claims(audience=s.resource)), "disallowed_algorithm"),
    Case(
        "HS256 keyed with the public key",
        lambda s, i: _hs256_with_public_key(i, i.claims(audience=s.resource)),
        "disallowed_algorithm",
    ),
    Case("wrong aud", lambda s, i: s.mint(audience="http://127.0.0.1:1/elsewhere"), "wrong_audience"),
    Case(
        "aud of another server, same scope name",
        lambda s, i: s.mint(audience="https://weather.example/mcp", scope="aml:read"),
        "wrong_audience",
    ),
    Case("no aud", lambda s, i: s.mint(remove=["aud"]), "wrong_audience"),
    Case("wrong iss (same key)", lambda s, i: s.mint(iss="https://evil.example"), "wrong_issuer"),
    Case("untrusted issuer", lambda s, i: _other_issuer_token(s), "wrong_issuer"),
    Case("expired", lambda s, i: s.mint(exp=NOW - 3600, iat=NOW - 7200, nbf=NOW - 7200), "expired"),
    Case("nbf in the future", lambda s, i: s.mint(nbf=int(time.time()) + 3600), "not_yet_valid"),
    Case("iat in the future", lambda s, i: s.mint(iat=int(time.time()) + 3600), "not_yet_valid"),
    Case("unknown kid", lambda s, i: s.mint(kid=i.add_key(publish=False)), "unknown_key"),
    Case("missing tenant", lambda s, i: s.mint(remove=["tenant"]), "missing_tenant"),
    Case("empty tenant", lambda s, i: s.mint(tenant=""), "missing_tenant"),
    Case("missing sub", lambda s, i: s.mint(remove=["sub"]), "missing_subject"),
    Case("missing client_id", lambda s, i: s.mint(remove=["client_id"]), "missing_client"),
    Case("missing scope claim", lambda s, i: s.mint(remove=["scope"]), "missing_scope_claim"),
    Case("missing jti", lambda s, i: s.mint(remove=["jti"]), "missing_jti"),
    Case("not an access token (typ JWT)", lambda s, i: s.mint(headers={"typ": "JWT"}), "wrong_token_type"),
    Case("tampered signature", lambda s, i: _tampered(s.mint()), "bad_signature"),
    Case(
        "unknown critical header",
        lambda s, i: s.mint(headers={"crit": ["exp-ext"], "exp-ext": 1}),
        "malformed_token",
    ),
    Case("garbage", lambda s, i: "not-a-jwt", "malformed_token"),
    Case("garbage with dots", lambda s, i: "a.b.c", "malformed_token"),
    Case("payload not an object", lambda s, i: _NOT_AN_OBJECT, "malformed_token"),
    Case("kid not a string", lambda s, i: _with_header(s.mint(), kid=7), "malformed_token"),
    Case(
        "token in the query string",
        lambda s, i: s.mint(),
        "token_in_query",
        status=400,
        error="invalid_request",
        query_token=True,
    ),
]


def _challenge_params(header: str) -> dict[str, str]:
    assert header.startswith("Bearer ")
    params = {}
    for part in header[len("Bearer ") :].split(", "):
        name, _, value = part.partition("=")
        params[name] = value.strip('"')
    return params


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_refusal(server: SecuredServer, issuer: TestIssuer, case: Case) -> None:
    mark = server.audit_mark()
    token = case.token(server, issuer)
    if case.query_token:
        response = server.post(
            "tools/call",
            {"name": "probe_read", "arguments": {}},
            token=token,
            path=f"/mcp?access_token={token}",
        )
    else:
        response = server.post(
            "tools/call", {"name": "probe_read", "arguments": {}}, token=token, request_id=41
        )
    assert response.status_code == case.status, response.text
    challenge = _challenge_params(response.headers["www-authenticate"])
    assert challenge["resource_metadata"] == server.url + METADATA_PATH
    assert challenge.get("error") == case.error
    if case.error is None:
        assert "error_description" not in challenge
    body = response.json()
    assert body["jsonrpc"] == "2.0" and "error" in body and "result" not in body
    if not case.query_token:
        assert body["id"] == 41
    event = server.wait_for_audit(since=mark, decision="deny", reason=case.reason)
    assert event["method"] == "tools/call" and event["target"] == "probe_read"
    assert event["subject"] is None  # nothing unverified is recorded as the principal


def test_no_token_challenge_names_the_scope_the_call_needs(server: SecuredServer) -> None:
    response = server.post("tools/call", {"name": "probe_draft", "arguments": {}})
    assert response.status_code == 401
    assert _challenge_params(response.headers["www-authenticate"])["scope"] == "aml:draft"


def test_a_valid_token_reaches_the_tool_as_the_principal(server: SecuredServer, issuer: TestIssuer) -> None:
    mark = server.audit_mark()
    token = server.mint(subject="bob", tenant="bank-b", client_id="copilot", scope="aml:read")
    response = server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=token)
    assert response.status_code == 200, response.text
    who = response.json()["result"]["structuredContent"]
    assert who == {
        "issuer": issuer.issuer,
        "subject": "bob",
        "tenant": "bank-b",
        "client_id": "copilot",
        "scopes": ["aml:read"],
    }
    event = server.wait_for_audit(since=mark, decision="allow")
    assert (event["issuer"], event["subject"], event["tenant"], event["client_id"]) == (
        issuer.issuer,
        "bob",
        "bank-b",
        "copilot",
    )
    assert event["reason"] == "ok" and event["target"] == "probe_read" and event["token_id"]


def test_audience_compare_accepts_uppercase_scheme_and_host(server: SecuredServer) -> None:
    shouted = server.resource.replace("http://127.0.0.1", "HTTP://127.0.0.1")
    token = server.mint(audience=["https://other.example/mcp", shouted])
    assert server.post("tools/list", token=token).status_code == 200


@pytest.mark.parametrize(("tool", "scope"), sorted(SCOPED_TOOLS.items()))
def test_insufficient_scope_is_403_naming_the_scope(server: SecuredServer, tool: str, scope: str) -> None:
    mark = server.audit_mark()
    others = " ".join(sorted(set(SCOPED_TOOLS.values()) - {scope}))
    token = server.mint(scope=others, subject="carol")
    response = server.post("tools/call", {"name": tool, "arguments": {}}, token=token, request_id="r-9")
    assert response.status_code == 403
    challenge = _challenge_params(response.headers["www-authenticate"])
    assert challenge["error"] == "insufficient_scope"
    assert challenge["scope"] == scope
    assert challenge["resource_metadata"] == server.url + METADATA_PATH
    assert response.json()["id"] == "r-9"
    event = server.wait_for_audit(since=mark, decision="deny", reason="insufficient_scope")
    assert event["subject"] == "carol" and event["target"] == tool
    assert event["detail"]["needed"] == [scope]
    # ... and with the scope, the same call goes through.
    ok = server.post("tools/call", {"name": tool, "arguments": {}}, token=server.mint(scope=scope))
    assert ok.status_code == 200


def test_admin_scope_implies_every_aml_scope(server: SecuredServer) -> None:
    token = server.mint(scope="aml:admin")
    for tool in SCOPED_TOOLS:
        assert server.post("tools/call", {"name": tool, "arguments": {}}, token=token).status_code == 200


def test_tools_list_shows_every_tool_with_its_scope_privately(server: SecuredServer) -> None:
    token = server.mint(scope="")
    response = server.post("tools/list", token=token)
    assert response.status_code == 200
    result = response.json()["result"]
    assert result["cacheScope"] == "private"
    scopes = {tool["name"]: tool.get("_meta", {}).get("aml-mcp/requiredScope") for tool in result["tools"]}
    assert scopes == {**SCOPED_TOOLS, "probe_open": None}


def test_an_unscoped_tool_needs_only_authentication(server: SecuredServer) -> None:
    assert server.post(
        "tools/call", {"name": "probe_open", "arguments": {}}, token=server.mint(scope="")
    ).is_success


def _refused_within(server: SecuredServer, token: str, seconds: float = 5.0) -> httpx.Response:
    """`aml-mcp revoke` writes the store; the running server re-reads the list every 0.2 s here."""
    return eventually(
        lambda: server.post("tools/list", token=token),
        until=lambda response: response.status_code != 200,
        timeout=seconds,
        interval=0.05,
        what="the revocation to reach the server",
    )


def _jti(token: str) -> str:
    return str(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["jti"])


def test_revoked_jti_is_refused(server: SecuredServer, issuer: TestIssuer) -> None:
    token = server.mint(subject="erin")
    untouched = server.mint(subject="erin")
    assert server.post("tools/list", token=token).status_code == 200
    mark = server.audit_mark()
    # `--jti=...`: a random token id may start with "-", which argparse would take for an option.
    assert cli_main(["revoke", "--data-dir", str(server.data_dir), f"--jti={_jti(token)}"]) == 0
    response = _refused_within(server, token)
    assert response.status_code == 401
    assert _challenge_params(response.headers["www-authenticate"])["error"] == "invalid_token"
    event = server.wait_for_audit(since=mark, decision="deny", reason="revoked_token")
    assert event["subject"] == "erin" and event["token_id"] == _jti(token)
    assert server.post("tools/list", token=untouched).status_code == 200


def test_revoked_subject_is_refused_until_lifted(server: SecuredServer, issuer: TestIssuer) -> None:
    token = server.mint(subject="mallory")
    revoke = ["revoke", "--data-dir", str(server.data_dir), "--subject", "mallory", "--issuer", issuer.issuer]
    assert cli_main(revoke) == 0
    assert _refused_within(server, token).status_code == 401
    server.wait_for_audit(decision="deny", reason="revoked_subject", subject="mallory")
    assert server.post("tools/list", token=server.mint(subject="mallory")).status_code == 401
    assert server.post("tools/list", token=server.mint(subject="trent")).status_code == 200
    assert cli_main([*revoke, "--lift"]) == 0
    assert eventually(
        lambda: server.post("tools/list", token=token).status_code == 200,
        interval=0.05,
        what="lifting the revocation to reach the server",
    )


def test_key_rotation_is_followed_and_unknown_kids_do_not_flood_the_issuer(
    server: SecuredServer, issuer: TestIssuer
) -> None:
    old = server.mint()
    issuer.rotate()
    fetches = issuer.jwks_requests
    new = server.mint()
    assert server.post("tools/list", token=new).status_code == 200  # unknown kid → one refetch → known
    assert issuer.jwks_requests == fetches + 1
    assert server.post("tools/list", token=old).status_code == 200  # old key still published


def test_two_authorization_headers_are_refused(server: SecuredServer) -> None:
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
    token = server.mint()
    response = server.http.post(
        "/mcp",
        content=body,
        headers=[
            ("content-type", "application/json"),
            ("authorization", f"Bearer {token}"),
            ("authorization", f"Bearer {token}"),
        ],
    )
    assert response.status_code == 400
    assert _challenge_params(response.headers["www-authenticate"])["error"] == "invalid_request"


def test_protected_resource_metadata(server: SecuredServer, issuer: TestIssuer) -> None:
    for path in ("/.well-known/oauth-protected-resource", METADATA_PATH):
        document = server.http.get(path).json()
        assert document["resource"] == server.resource
        assert document["authorization_servers"] == [issuer.issuer]
        assert document["bearer_methods_supported"] == ["header"]
        assert document["scopes_supported"] == sorted(SCOPED_TOOLS.values())
        assert document["resource_name"]
