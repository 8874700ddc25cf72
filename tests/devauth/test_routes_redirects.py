"""No open redirector, and strict loopback redirect URIs, over real HTTP.

Anyone may register a client with an https redirect URI. An authorization request that fails
before any user acted must not forward the browser there (RFC 9700 §4.11.2): the user sees the
error and a link instead. Loopback redirect URIs (an application on the user's own machine) still
get their errors at once. A loopback redirect URI is `http://127.0.0.1`, `localhost` or `[::1]`
with, at most, a decimal port from 1 to 65535; nothing looser gets a code.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from aml_mcp.devauth.redirects import acceptable_redirect_uri, redirect_matches
from tests.support.dev_issuer import (
    REDIRECT,
    approved_code,
    authorize_url,
    dev_issuer_server,
    redirect_params,
)
from tests.support.oauth import SecuredServer, approve

LANDING = "https://attacker.example/landing"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path_factory.mktemp("redirects")) as running:
        yield running


@pytest.fixture(scope="module")
def remote_client(server: SecuredServer) -> str:
    """A public client anyone could register, answered at an https site."""
    answer = server.http.post(
        f"{server.url}/oauth/register",
        json={"redirect_uris": [LANDING], "token_endpoint_auth_method": "none", "client_name": "remote"},
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["client_id"])


@pytest.mark.parametrize(
    "params",
    [{"scope": "nope"}, {"code_challenge": ""}, {"response_type": "token"}, {"resource": "not a uri"}],
    ids=["unknown-scope", "no-pkce", "response-type", "bad-resource"],
)
def test_errors_are_not_forwarded_to_a_remote_redirect_uri_before_the_user_acts(
    server: SecuredServer, remote_client: str, params: dict[str, str]
) -> None:
    url = authorize_url(server, client_id=remote_client, redirect_uri=LANDING, **params)
    answer = httpx.get(url, follow_redirects=False)
    assert answer.status_code == 400 and "location" not in answer.headers
    # The user is told where the link would lead, and may follow it themselves.
    assert "attacker.example" in answer.text and "href='https://attacker.example/landing?" in answer.text


def test_a_loopback_redirect_uri_still_gets_its_error_at_once(server: SecuredServer) -> None:
    answer = httpx.get(authorize_url(server, scope="nope"), follow_redirects=False)
    assert answer.status_code == 302
    params = redirect_params(answer.headers["location"])
    assert answer.headers["location"].startswith(REDIRECT)
    assert params["error"] == "invalid_scope" and params["iss"] == f"{server.url}/oauth"


def test_after_the_user_acts_a_remote_client_is_answered(server: SecuredServer, remote_client: str) -> None:
    url = authorize_url(server, client_id=remote_client, redirect_uri=LANDING)
    denied = approve(url, "alice", decision="deny")
    assert denied.startswith(LANDING) and redirect_params(denied)["error"] == "access_denied"
    approved = approve(url, "alice")
    assert approved.startswith(LANDING) and redirect_params(approved)["code"]


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:abc/callback",
        "http://127.0.0.1:0/callback",
        "http://127.0.0.1:99999/callback",
        "http://127.0.0.1:/callback",
        "http://127.0.0.1:080/callback",
        "http://127.0.0.1:+80/callback",
        "http://evil@127.0.0.1/callback",
        "http://evil@127.0.0.1:8080/callback",
        "http://LOCALHOST/callback",
        "http://127.1/callback",
        "http://127.0.0.1:8080/callback#frag",
        "http://127.0.0.1:8080 /callback",
    ],
)
def test_loose_loopback_redirect_uris_are_refused_and_never_redirected_to(
    server: SecuredServer, redirect_uri: str
) -> None:
    answer = httpx.get(authorize_url(server, redirect_uri=redirect_uri), follow_redirects=False)
    assert answer.status_code == 400 and "location" not in answer.headers


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:1/callback",
        "http://127.0.0.1:65535/callback",
        "http://127.0.0.1/callback",
        "http://localhost:8080/callback",
    ],
)
def test_loopback_redirect_uris_with_any_valid_port_get_a_code(
    server: SecuredServer, redirect_uri: str
) -> None:
    code, _ = approved_code(server, redirect_uri=redirect_uri)
    assert code


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:abc/cb",
        "http://127.0.0.1:0/cb",
        "http://user@127.0.0.1/cb",
        "https://user@app.example/cb",
        "https://app.example:99999/cb",
        "https://app.example:/cb",
        "http://127.0.0.2/cb",
        "https://app example/cb",
    ],
)
def test_registration_refuses_loose_redirect_uris(server: SecuredServer, redirect_uri: str) -> None:
    answer = server.http.post(f"{server.url}/oauth/register", json={"redirect_uris": [redirect_uri]})
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_client_metadata"


# --- the rules themselves ---


@pytest.mark.parametrize(
    ("registered", "presented", "matches"),
    [
        ("http://127.0.0.1/callback", "http://127.0.0.1:8080/callback", True),
        ("http://127.0.0.1/callback", "http://127.0.0.1/callback", True),
        ("http://[::1]/callback", "http://[::1]:5000/callback", True),
        ("http://127.0.0.1/callback", "http://127.0.0.1:abc/callback", False),
        ("http://127.0.0.1/callback", "http://127.0.0.1:65536/callback", False),
        ("http://127.0.0.1/callback", "http://127.0.0.1:/callback", False),
        ("http://127.0.0.1/callback", "http://a@127.0.0.1:80/callback", False),
        ("http://127.0.0.1/callback", "http://localhost:80/callback", False),
        ("http://127.0.0.1/callback", "http://127.0.0.1:80/callback/", False),
        ("http://127.0.0.1/callback", "http://127.0.0.1:80/callback?x=1", False),
        ("http://127.0.0.1:3000/callback", "http://127.0.0.1:3001/callback", False),
        ("https://app.example/cb", "https://app.example:443/cb", False),
        # A malformed URI registered before these rules no longer matches even itself.
        ("http://127.0.0.1:abc/cb", "http://127.0.0.1:abc/cb", False),
        ("http://evil@127.0.0.1/cb", "http://evil@127.0.0.1/cb", False),
    ],
)
def test_redirect_matching(registered: str, presented: str, matches: bool) -> None:
    assert redirect_matches(registered, presented) is matches


@pytest.mark.parametrize(
    ("uri", "acceptable"),
    [
        ("https://app.example/cb", True),
        ("https://app.example:8443/cb?x=1", True),
        ("https://[2001:db8::1]/cb", True),
        ("http://[::1]:3000/cb", True),
        ("http://app.example/cb", False),
        ("https://app.example/cb#f", False),
        ("javascript:alert(1)", False),
        ("https:///cb", False),
        ("https://app.example\\@evil.example/cb", False),
        ("https://app.example/c\nb", False),
        (42, False),
    ],
)
def test_acceptable_redirect_uris(uri: object, acceptable: bool) -> None:
    assert acceptable_redirect_uri(uri) is acceptable
