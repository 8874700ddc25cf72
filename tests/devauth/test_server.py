"""The development authorization server over HTTP (in-process): what it refuses, what it issues, and how."""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.devauth.wiring import CLI_CLIENT_ID, SERVICE_CLIENT_ID, service_client_secret
from aml_mcp.shared_secrets.storage.files import FilesSecrets
from tests.support.oauth import SecuredServer, approve, consent_form, secured_server
from tests.support.scoped_catalog import scoped_catalog

REDIRECT = "http://127.0.0.1:9/callback"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("devauth")
    with secured_server(data_dir, scoped_catalog(), dev=True) as running:
        yield running


@pytest.fixture(scope="module")
def meta(server: SecuredServer) -> dict[str, Any]:
    return dict(server.http.get("/.well-known/oauth-authorization-server/oauth").json())


def _claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")))


def _pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(
        b"="
    ).decode()


def _authorize_url(meta: dict[str, Any], **params: str) -> str:
    query = {
        "response_type": "code",
        "client_id": CLI_CLIENT_ID,
        "redirect_uri": REDIRECT,
        "state": "st-1",
        "scope": "aml:read",
        **params,
    }
    return f"{meta['authorization_endpoint']}?{urlencode({k: v for k, v in query.items() if v})}"


def _redirect_params(location: str) -> dict[str, str]:
    assert location.startswith(REDIRECT)
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def _code(server: SecuredServer, meta: dict[str, Any], user: str, **params: str) -> tuple[str, str]:
    verifier, challenge = _pkce()
    url = _authorize_url(meta, code_challenge=challenge, code_challenge_method="S256", **params)
    return _redirect_params(approve(url, user, browser=server.client()))["code"], verifier


def _exchange(
    server: SecuredServer, meta: dict[str, Any], code: str, verifier: str, **extra: str
) -> httpx.Response:
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": CLI_CLIENT_ID,
        "code_verifier": verifier,
        **extra,
    }
    return server.http.post(meta["token_endpoint"], data=data)


def test_metadata_advertises_what_mcp_clients_check(server: SecuredServer, meta: dict[str, Any]) -> None:
    assert meta["issuer"] == f"{server.url}/oauth"
    assert meta["code_challenge_methods_supported"] == ["S256"]
    assert meta["authorization_response_iss_parameter_supported"] is True
    assert meta["client_id_metadata_document_supported"] is True
    assert {"authorization_code", "refresh_token", "client_credentials"} <= set(meta["grant_types_supported"])
    assert server.http.get("/oauth/.well-known/oauth-authorization-server").json() == meta
    jwks = server.http.get(meta["jwks_uri"]).json()
    assert jwks["keys"] and all("d" not in key and key["alg"] == "RS256" for key in jwks["keys"])


def test_pkce_is_required(server: SecuredServer, meta: dict[str, Any]) -> None:
    answer = server.http.get(_authorize_url(meta), follow_redirects=False)
    assert answer.status_code == 302
    params = _redirect_params(answer.headers["location"])
    assert params["error"] == "invalid_request" and params["state"] == "st-1"
    assert params["iss"] == meta["issuer"]  # RFC 9207 on error responses too


def test_plain_pkce_is_refused(server: SecuredServer, meta: dict[str, Any]) -> None:
    verifier, _ = _pkce()
    url = _authorize_url(meta, code_challenge=verifier, code_challenge_method="plain")
    params = _redirect_params(server.http.get(url, follow_redirects=False).headers["location"])
    assert params["error"] == "invalid_request"


@pytest.mark.parametrize(
    "params",
    [{"client_id": "nobody"}, {"redirect_uri": "https://evil.example/cb"}],
    ids=["client", "redirect"],
)
def test_unknown_client_or_redirect_is_never_redirected_to(
    server: SecuredServer, meta: dict[str, Any], params: dict[str, str]
) -> None:
    _, challenge = _pkce()
    answer = server.http.get(
        _authorize_url(meta, code_challenge=challenge, code_challenge_method="S256", **params),
        follow_redirects=False,
    )
    assert answer.status_code == 400
    assert "location" not in answer.headers


def test_wrong_password_shows_the_page_again_and_deny_redirects_access_denied(
    server: SecuredServer, meta: dict[str, Any]
) -> None:
    _, challenge = _pkce()
    url = _authorize_url(meta, code_challenge=challenge, code_challenge_method="S256")
    with server.client() as browser:
        page = browser.get(url)
        assert page.status_code == 200 and "127.0.0.1" in page.text and "aml:read" in page.text
        wrong = browser.post(url, data=consent_form(page.text, "alice", "nope", "approve"))
        assert wrong.status_code == 401 and "wrong password" in wrong.text
        forged = consent_form(page.text, "alice", None, "approve")
        forged["scope"] = ["aml:admin"]  # changing the request under the form's signature is caught
        assert browser.post(url, data=forged).status_code == 400
    denied = _redirect_params(approve(url, "alice", decision="deny", browser=server.client()))
    assert (
        denied["error"] == "access_denied" and denied["iss"] == meta["issuer"] and denied["state"] == "st-1"
    )


def test_code_is_single_use_and_bound_to_the_verifier(server: SecuredServer, meta: dict[str, Any]) -> None:
    code, verifier = _code(server, meta, "alice")
    assert _exchange(server, meta, code, "x" * 50).json()["error"] == "invalid_grant"
    code, verifier = _code(server, meta, "alice")
    assert _exchange(server, meta, code, verifier).status_code == 200
    assert _exchange(server, meta, code, verifier).json()["error"] == "invalid_grant"


def test_resource_becomes_aud_and_must_not_change_at_the_token_endpoint(
    server: SecuredServer, meta: dict[str, Any]
) -> None:
    code, verifier = _code(server, meta, "bob", resource="https://weather.example/mcp")
    mismatch = _exchange(server, meta, code, verifier, resource=server.resource)
    assert mismatch.status_code == 400 and mismatch.json()["error"] == "invalid_target"
    code, verifier = _code(server, meta, "bob", resource="https://weather.example/mcp")
    token = _exchange(server, meta, code, verifier).json()
    assert _claims(token["access_token"])["aud"] == "https://weather.example/mcp"
    assert server.post("tools/list", token=token["access_token"]).status_code == 401
    code, verifier = _code(server, meta, "bob")  # no resource → this server is the default audience
    assert _claims(_exchange(server, meta, code, verifier).json()["access_token"])["aud"] == server.resource


def test_users_grant_only_scopes_they_hold(server: SecuredServer, meta: dict[str, Any]) -> None:
    code, verifier = _code(server, meta, "bob", scope="aml:read aml:draft")
    token = _exchange(server, meta, code, verifier).json()
    assert token["scope"] == "aml:read"
    claims = _claims(token["access_token"])
    assert claims["tenant"] == "harbour-trust" and claims["scope"] == "aml:read"
    header = json.loads(base64.urlsafe_b64decode(token["access_token"].split(".")[0] + "=="))
    assert header["typ"] == "at+jwt" and header["alg"] == "RS256"


def test_client_credentials_for_the_service_client(server: SecuredServer, meta: dict[str, Any]) -> None:
    secret = service_client_secret(FilesSecrets(server.data_dir / "keys"))
    granted = server.http.post(
        meta["token_endpoint"],
        data={"grant_type": "client_credentials", "scope": "aml:read", "resource": server.resource},
        auth=(SERVICE_CLIENT_ID, secret),
    )
    assert granted.status_code == 200, granted.text
    assert "refresh_token" not in granted.json()
    claims = _claims(granted.json()["access_token"])
    assert (claims["sub"], claims["client_id"], claims["tenant"]) == (
        SERVICE_CLIENT_ID,
        SERVICE_CLIENT_ID,
        "meridian-bank",
    )
    call = server.post(
        "tools/call", {"name": "probe_read", "arguments": {}}, token=granted.json()["access_token"]
    )
    assert call.status_code == 200
    wrong = server.http.post(
        meta["token_endpoint"], data={"grant_type": "client_credentials"}, auth=(SERVICE_CLIENT_ID, "nope")
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    public = server.http.post(
        meta["token_endpoint"], data={"grant_type": "client_credentials", "client_id": CLI_CLIENT_ID}
    )
    assert public.status_code in {400, 401}


def test_dynamic_registration_rules(server: SecuredServer, meta: dict[str, Any]) -> None:
    register = meta["registration_endpoint"]
    assert server.http.post(register, json={"redirect_uris": ["http://evil.example/cb"]}).status_code == 400
    assert (
        server.http.post(
            register, json={"redirect_uris": [REDIRECT], "grant_types": ["client_credentials"]}
        ).status_code
        == 400
    )
    assert server.http.post(register, content=b"[not json").status_code == 400
    for bad in (
        {"redirect_uris": [1, 2]},
        {"redirect_uris": "x"},
        {},
        {"redirect_uris": [REDIRECT], "scope": 5},
    ):
        assert server.http.post(register, json=bad).status_code == 400, bad
    confidential = server.http.post(register, json={"redirect_uris": [REDIRECT], "client_name": "conf"})
    assert confidential.status_code == 201
    info = confidential.json()
    assert info["token_endpoint_auth_method"] == "client_secret_basic" and info["client_secret"]
    verifier, challenge = _pkce()
    url = _authorize_url(
        meta, client_id=info["client_id"], code_challenge=challenge, code_challenge_method="S256"
    )
    code = _redirect_params(approve(url, "dave", browser=server.client()))["code"]
    token = server.http.post(
        meta["token_endpoint"],
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
        },
        auth=(info["client_id"], info["client_secret"]),
    )
    assert token.status_code == 200, token.text
    assert _claims(token.json()["access_token"])["client_id"] == info["client_id"]


def test_key_rotation_keeps_old_tokens_valid(server: SecuredServer, meta: dict[str, Any]) -> None:
    old = server.dev_token(scope="aml:read").token
    before = {key["kid"] for key in server.http.get(meta["jwks_uri"]).json()["keys"]}
    assert cli_main(["devauth", "rotate-keys", "--data-dir", str(server.data_dir)]) == 0
    after = {key["kid"] for key in server.http.get(meta["jwks_uri"]).json()["keys"]}
    assert before < after
    new = server.dev_token(scope="aml:read").token
    assert json.loads(base64.urlsafe_b64decode(new.split(".")[0] + "=="))["kid"] in after - before
    assert server.post("tools/list", token=new).status_code == 200
    assert server.post("tools/list", token=old).status_code == 200


def test_token_command_prints_a_token_this_server_accepts(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["token", "--data-dir", str(server.data_dir), "--port", str(server.port)]
    args += ["--subject", "dave", "--tenant", "bank-b", "--client", "script", "--scope", "aml:read aml:eval"]
    assert cli_main(args) == 0
    token = capsys.readouterr().out.strip()
    claims = _claims(token)
    assert (claims["sub"], claims["tenant"], claims["client_id"], claims["aud"]) == (
        "dave",
        "bank-b",
        "script",
        server.resource,
    )
    assert server.post("tools/call", {"name": "probe_eval", "arguments": {}}, token=token).status_code == 200
    assert cli_main([*args, "--audience", "https://other.example/mcp", "--ttl", "60"]) == 0
    elsewhere = capsys.readouterr().out.strip()
    assert _claims(elsewhere)["exp"] - _claims(elsewhere)["iat"] == 60
    assert server.post("tools/list", token=elsewhere).status_code == 401
