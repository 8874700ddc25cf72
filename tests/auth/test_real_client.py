"""The official `mcp` 2.3.0 client's OAuth support against our dev authorization server and our server.

Real HTTP on 127.0.0.1 only (the SDK client's own HTTP stack is part of what is under test). The
SDK does all of it: 401 → protected resource metadata → authorization server metadata → dynamic
registration → PKCE authorization request with `resource` → (the browser step, played by
`approve_async`) → RFC 9207 `iss` check → token exchange with `resource` → tools/call with the
token. A later call needing a scope the token lacks gets a 403 `insufficient_scope`, and the SDK's
step-up re-authorization (the union of both scopes) makes it pass.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    OAuthClientMetadata,
)
from pydantic import AnyUrl

from tests.support.oauth import SecuredServer, secured_server
from tests.support.scoped_catalog import scoped_catalog
from tests.support.sdk_oauth import Browser, MemoryStorage

REDIRECT_URI = "http://127.0.0.1:9/callback"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("real-client")
    with secured_server(data_dir, scoped_catalog(), dev=True, real_socket=True) as running:
        yield running


def _claims(token: str) -> dict[str, Any]:
    return dict(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "==")))


@pytest.mark.anyio
async def test_sdk_client_completes_the_oauth_flow_and_steps_up(server: SecuredServer) -> None:
    storage = MemoryStorage()
    browser = Browser("carol")  # carol (meridian-bank) holds aml:admin, so she can consent to a step-up
    provider = OAuthClientProvider(
        server_url=server.resource,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            client_name="sdk real-client test",
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=30) as http,
        Client(streamable_http_client(server.resource, http_client=http), mode="2026-07-28") as client,
    ):
        result = await client.call_tool("probe_read", {})
        assert not result.is_error
        assert result.structured_content is not None
        assert result.structured_content["subject"] == "carol"
        assert result.structured_content["tenant"] == "meridian-bank"

        # What the SDK did on the way: registered, asked with resource + PKCE S256 + least scope.
        assert storage.client_info is not None and storage.client_info.client_id
        first = parse_qs(urlsplit(browser.visits[0]).query)
        assert first["resource"] == [server.resource]
        assert first["code_challenge_method"] == ["S256"]
        assert first["scope"] == ["aml:read"]
        assert storage.tokens is not None
        claims = _claims(storage.tokens.access_token)
        assert claims["aud"] == server.resource and claims["scope"] == "aml:read"

        # Step-up: a tool needing aml:draft → 403 insufficient_scope → re-authorize with both → retry.
        drafted = await client.call_tool("probe_draft", {})
        assert not drafted.is_error
        assert len(browser.visits) == 2
        assert set(parse_qs(urlsplit(browser.visits[1]).query)["scope"][0].split()) == {
            "aml:read",
            "aml:draft",
        }
        assert set(_claims(storage.tokens.access_token)["scope"].split()) == {"aml:read", "aml:draft"}

        # The earlier scope survived the step-up.
        assert not (await client.call_tool("probe_read", {})).is_error

    server.wait_for_audit(decision="deny", reason="no_token", target="probe_read")
    server.wait_for_audit(decision="deny", reason="insufficient_scope", target="probe_draft", subject="carol")
    server.wait_for_audit(decision="allow", target="probe_draft", subject="carol")
