"""The seed's seven-step flow (section B), end to end over HTTP (in-process) against the embedded dev issuer.

1. client → server: tools/call without a token
2. server → client: 401 + WWW-Authenticate pointing at /.well-known/oauth-protected-resource (RFC 9728)
3. client reads the metadata → the authorization server and the scope needed
4. client → authorization server: authorization request with resource=<this server> (RFC 8707), scope=aml:read
5. authorization server → client: access token with aud=<this server>
6. client → server: tools/call + Authorization: Bearer <token>
7. server checks aud, scope, iss: yes → the tool runs; no → refused and audited
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from tests.support.oauth import SecuredServer, approve, secured_server
from tests.support.scoped_catalog import scoped_catalog

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never contacted: the test reads the redirect itself


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("seven")
    with secured_server(data_dir, scoped_catalog(), dev=True) as running:
        yield running


def _claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")))


def _authorize(
    server: SecuredServer, as_meta: dict[str, Any], client_id: str, *, scope: str, resource: str, user: str
) -> dict[str, Any]:
    """Steps 4-5: PKCE authorization request with `resource`, login/consent, code → token."""
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    state = secrets.token_urlsafe(16)
    query = urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT_URI,
            "scope": scope,
            "state": state,
            "code_challenge": challenge,
            "code_challenge_method": "S256",
            "resource": resource,
        }
    )
    location = approve(f"{as_meta['authorization_endpoint']}?{query}", user, browser=server.client())
    assert location.startswith(REDIRECT_URI)
    answer = {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}
    assert answer["state"] == state
    assert answer["iss"] == as_meta["issuer"]  # RFC 9207: the client can tell which server answered
    token = server.http.post(
        as_meta["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": answer["code"],
            "redirect_uri": REDIRECT_URI,
            "client_id": client_id,
            "code_verifier": verifier,
            "resource": resource,
        },
    )
    assert token.status_code == 200, token.text
    assert token.headers["cache-control"] == "no-store"
    return dict(token.json())


def test_seven_step_flow(server: SecuredServer) -> None:
    call = {"name": "probe_read", "arguments": {}}

    # 1-2. No token: 401 naming the resource metadata and the scope the call needs.
    first = server.post("tools/call", call)
    assert first.status_code == 401
    challenge = first.headers["www-authenticate"]
    metadata_url = challenge.split('resource_metadata="')[1].split('"')[0]
    assert metadata_url == f"{server.url}/.well-known/oauth-protected-resource/mcp"
    assert 'scope="aml:read"' in challenge
    server.wait_for_audit(decision="deny", reason="no_token", target="probe_read")

    # 3. Protected resource metadata → authorization server → its RFC 8414 metadata.
    prm = server.http.get(metadata_url).json()
    assert prm["resource"] == server.resource
    issuer = prm["authorization_servers"][0]
    issuer_path = urlsplit(issuer).path
    as_meta = server.http.get(f"{server.url}/.well-known/oauth-authorization-server{issuer_path}").json()
    assert as_meta["issuer"] == issuer
    assert as_meta["code_challenge_methods_supported"] == ["S256"]
    assert as_meta["authorization_response_iss_parameter_supported"] is True

    # (registration: dynamic client registration, a public native client)
    registered = server.http.post(
        as_meta["registration_endpoint"],
        json={
            "redirect_uris": [REDIRECT_URI],
            "client_name": "seven-step client",
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "application_type": "native",
        },
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]

    # 4-5. Authorization with resource=this server and the least scope → token with aud=this server.
    token = _authorize(server, as_meta, client_id, scope="aml:read", resource=server.resource, user="alice")
    claims = _claims(token["access_token"])
    assert claims["aud"] == server.resource
    assert claims["iss"] == issuer
    assert claims["scope"] == "aml:read" and token["scope"] == "aml:read"
    assert (claims["sub"], claims["tenant"], claims["client_id"]) == ("alice", "meridian-bank", client_id)

    # 6-7. The call with the token: aud, scope and iss check out → the tool runs as alice@meridian-bank.
    mark = server.audit_mark()
    ok = server.post("tools/call", call, token=token["access_token"])
    assert ok.status_code == 200, ok.text
    assert ok.json()["result"]["structuredContent"]["tenant"] == "meridian-bank"
    allowed = server.wait_for_audit(since=mark, decision="allow", target="probe_read")
    assert (allowed["subject"], allowed["tenant"], allowed["client_id"]) == (
        "alice",
        "meridian-bank",
        client_id,
    )

    # 7, "no" branch (scope): the same token for a tool needing aml:eval → 403, audited.
    denied = server.post("tools/call", {"name": "probe_eval", "arguments": {}}, token=token["access_token"])
    assert denied.status_code == 403
    assert 'error="insufficient_scope"' in denied.headers["www-authenticate"]
    assert 'scope="aml:eval"' in denied.headers["www-authenticate"]
    server.wait_for_audit(since=mark, decision="deny", reason="insufficient_scope", subject="alice")

    # 7, "no" branch (audience — the load-bearing wall): the same authorization server, the same user,
    # the same scope name, but a token requested for another resource is refused here.
    weather = _authorize(
        server, as_meta, client_id, scope="aml:read", resource="https://weather.example/mcp", user="alice"
    )
    assert _claims(weather["access_token"])["aud"] == "https://weather.example/mcp"
    replayed = server.post("tools/call", call, token=weather["access_token"])
    assert replayed.status_code == 401
    assert 'error="invalid_token"' in replayed.headers["www-authenticate"]
    server.wait_for_audit(since=mark, decision="deny", reason="wrong_audience")

    # The refresh token rotates and keeps the audience.
    refreshed = server.http.post(
        as_meta["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": token["refresh_token"], "client_id": client_id},
    )
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["refresh_token"] != token["refresh_token"]
    assert _claims(refreshed.json()["access_token"])["aud"] == server.resource
    again = server.http.post(
        as_meta["token_endpoint"],
        data={"grant_type": "refresh_token", "refresh_token": token["refresh_token"], "client_id": client_id},
    )
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"
