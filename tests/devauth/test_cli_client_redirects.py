"""The pre-registered command-line client `aml-mcp-cli` accepts any loopback redirect URI, and only
those (RFC 8252 §7.3, §8.3), over real HTTP.

A native tool picks a free port and its own callback path (the Inspector uses `/oauth/callback`,
others `/callback` or `/`): any `http` URI on `127.0.0.1`, `localhost` or `[::1]` gets a code.
Anything that could land the code elsewhere — another host that merely starts like a loopback
one, userinfo, a fragment, https, encoded or case tricks — is refused with a page, never a
redirect.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.dev_issuer import approved_code, authorize_url, dev_issuer_server
from tests.support.oauth import SecuredServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path_factory.mktemp("cli-redirects")) as running:
        yield running


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1:6274/oauth/callback",
        "http://localhost:6274/oauth/callback",
        "http://[::1]:43111/callback",
        "http://127.0.0.1:1/",
        "http://127.0.0.1:65535",
        "http://localhost/any/deep/path",
        "http://127.0.0.1:8080/cb?session=abc",
    ],
)
def test_any_loopback_port_and_path_gets_a_code(server: SecuredServer, redirect_uri: str) -> None:
    code, _ = approved_code(server, redirect_uri=redirect_uri)
    assert code


@pytest.mark.parametrize(
    "redirect_uri",
    [
        "http://127.0.0.1.evil.com/callback",
        "http://127.0.0.1.evil.com:8080/oauth/callback",
        "http://localhost.evil.com/callback",
        "http://localhost@evil/callback",
        "http://localhost:80@evil.example/callback",
        "http://evil.example#@127.0.0.1/callback",
        "http://127.0.0.1:8080/callback#fragment",
        "https://127.0.0.1:8080/callback",
        "https://localhost/callback",
        "http://127.0.0.1%2eevil.com/callback",
        "http://127%2e0%2e0%2e1:8080/callback",
        "http://%6c%6f%63%61%6c%68%6f%73%74:8080/callback",
        "http://127.0.0.1\\@evil.example/callback",
        "http://[::ffff:127.0.0.1]:8080/callback",
        "http://0x7f000001:8080/callback",
        "http://2130706433:8080/callback",
        "http://127.0.0.2:8080/callback",
        "http://LOCALHOST:8080/callback",
        "http://evil.example/127.0.0.1/callback",
        "//127.0.0.1:8080/callback",
        "javascript://127.0.0.1/%0aalert(1)",
        "http://127.0.0.1:8080/call back",
        "http://127.0.0.1:0/callback",
    ],
)
def test_hostile_redirects_are_refused_and_never_redirected_to(
    server: SecuredServer, redirect_uri: str
) -> None:
    answer = httpx.get(authorize_url(server, redirect_uri=redirect_uri), follow_redirects=False)
    assert answer.status_code == 400, redirect_uri
    assert "location" not in answer.headers


def test_a_dynamically_registered_client_still_gets_exact_matching(server: SecuredServer) -> None:
    """Even one that asks for the command-line client's freedom in its metadata."""
    registered = "http://127.0.0.1/callback"
    answer = server.http.post(
        f"{server.url}/oauth/register",
        json={
            "redirect_uris": [registered],
            "token_endpoint_auth_method": "none",
            "any_loopback_redirect": True,
        },
    )
    assert answer.status_code == 201, answer.text
    client_id = answer.json()["client_id"]
    # The port is free (RFC 8252 §7.3); the path is the registered one.
    assert approved_code(server, client_id=client_id, redirect_uri="http://127.0.0.1:7000/callback")[0]
    other_path = authorize_url(server, client_id=client_id, redirect_uri="http://127.0.0.1:7000/other")
    assert httpx.get(other_path, follow_redirects=False).status_code == 400
