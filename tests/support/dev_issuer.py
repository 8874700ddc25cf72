"""Driving the development authorization server over real HTTP: a server, PKCE, codes, token calls.

`dev_issuer_server(data_dir, **dev_settings)` runs the whole app (authentication on, the dev issuer
mounted at `/oauth`) with a one-tool catalog and `DevAuthSettings(**dev_settings)`. The other
helpers play the client: a PKCE pair, an authorization URL, a code approved by a demo user, and
the token endpoint calls of the code and refresh grants.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import mcp_types as types

from aml_mcp.aml.tools.scopes import SCOPE_HIERARCHY
from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import ToolSpec
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.wiring import CLI_CLIENT_ID
from tests.support.oauth import SecuredServer, approve, auth_settings, secured_server

REDIRECT = "http://127.0.0.1:9/callback"
"""A redirect URI the pre-registered command-line client accepts (loopback, any port)."""


async def _whoami(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=ctx.principal.subject)])


def probe_catalog() -> Catalog:
    """One tool needing `aml:read`, with the AML scope hierarchy."""
    tools = ToolRegistry(
        [
            ToolSpec(
                name="probe_read",
                description="test tool needing aml:read",
                input_schema={"type": "object", "properties": {}},
                body=_whoami,
                scope="aml:read",
            )
        ]
    )
    return Catalog(tools=tools, scope_hierarchy=SCOPE_HIERARCHY)


@contextlib.contextmanager
def dev_issuer_server(data_dir: Path, **dev_settings: Any) -> Iterator[SecuredServer]:
    """The app with the development issuer on, configured by `DevAuthSettings(**dev_settings)`."""
    auth = auth_settings(dev=True).model_copy(update={"dev": DevAuthSettings(**dev_settings)})
    with secured_server(data_dir, probe_catalog(), auth=auth, real_socket=True) as server:
        yield server


def pkce() -> tuple[str, str]:
    """(verifier, S256 challenge)."""
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    return verifier, base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def authorize_url(server: SecuredServer, **params: str) -> str:
    """An authorization request for the command-line client (override any parameter; "" drops it)."""
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": CLI_CLIENT_ID,
        "redirect_uri": REDIRECT,
        "state": "st-1",
        "scope": "aml:read",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        **params,
    }
    return f"{server.url}/oauth/authorize?{urlencode({k: v for k, v in query.items() if v})}"


def redirect_params(location: str) -> dict[str, str]:
    return {key: values[0] for key, values in parse_qs(urlsplit(location).query).items()}


def approved_code(
    server: SecuredServer,
    *,
    user: str = "alice",
    client_id: str = CLI_CLIENT_ID,
    redirect_uri: str = REDIRECT,
) -> tuple[str, str]:
    """(code, verifier): an authorization code a demo user approved."""
    verifier, challenge = pkce()
    url = authorize_url(server, client_id=client_id, redirect_uri=redirect_uri, code_challenge=challenge)
    location = approve(url, user)
    assert location.startswith(redirect_uri), location
    return redirect_params(location)["code"], verifier


def redeem_code(
    http: httpx.Client, server: SecuredServer, code: str, verifier: str, *, client_id: str = CLI_CLIENT_ID
) -> httpx.Response:
    return http.post(
        f"{server.url}/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )


def refresh(
    http: httpx.Client,
    server: SecuredServer,
    refresh_token: str,
    *,
    client_id: str = CLI_CLIENT_ID,
    **extra: str,
) -> httpx.Response:
    return http.post(
        f"{server.url}/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id, **extra},
    )
