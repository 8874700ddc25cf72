"""`McpClient` with OAuth against the development authorization server, over real HTTP: discovery,
dynamic registration, PKCE with `resource`, the loopback redirect a browser would follow, step-up
on 403 `insufficient_scope`, and the token cache on disk (0600) a second run signs in from."""

from __future__ import annotations

import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import mcp_types as types
import pytest

from aml_mcp.client import McpClient
from aml_mcp.client.oauth import FileTokenStorage, LoopbackCatcher, oauth_provider
from tests.support.oauth import SecuredServer, approve, secured_server
from tests.support.scoped_catalog import scoped_catalog


class Browser:
    """Plays the person: opens the authorization URL, signs in as `username` and consents, then
    follows the redirect to the client's loopback listener, as a browser does."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.visits: list[str] = []

    def open(self, authorization_url: str) -> bool:
        self.visits.append(authorization_url)

        def sign_in() -> None:
            location = approve(authorization_url, self.username)
            httpx.get(location, timeout=15)

        threading.Thread(target=sign_in, daemon=True).start()
        return True


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("client-oauth"), scoped_catalog(), dev=True, real_socket=True
    ) as s:
        yield s


def _client(server: SecuredServer, cache: Path, browser: Browser) -> McpClient:
    catcher = LoopbackCatcher(open_browser=browser.open, show=lambda _: None)
    provider = oauth_provider(
        server.resource, storage=FileTokenStorage(cache, server.resource), catcher=catcher, client_name="test"
    )
    return McpClient(server.resource, auth=provider, mode="2026-07-28")


def test_sign_in_step_up_and_the_cached_token(server: SecuredServer, tmp_path: Path) -> None:
    cache = tmp_path / "aml-mcp" / "tokens.json"
    browser = Browser("carol")

    async def first_run() -> None:
        async with _client(server, cache, browser) as client:
            read = await client.call_tool("probe_read", {})
            assert isinstance(read, types.CallToolResult) and read.structured_content is not None
            assert read.structured_content["subject"] == "carol"
            drafted = await client.call_tool("probe_draft", {})
            assert isinstance(drafted, types.CallToolResult) and drafted.is_error is not True

    anyio.run(first_run)
    assert len(browser.visits) == 2
    first, second = (parse_qs(urlsplit(visit).query) for visit in browser.visits)
    assert first["resource"] == [server.resource] and first["code_challenge_method"] == ["S256"]
    assert first["scope"] == ["aml:read"]
    assert set(second["scope"][0].split()) == {
        "aml:read",
        "aml:draft",
    }  # the challenged scope, kept with the earlier
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.parent.stat().st_mode) == 0o700

    again = Browser("carol")

    async def second_run() -> None:
        async with _client(server, cache, again) as client:
            drafted = await client.call_tool("probe_draft", {})
            assert isinstance(drafted, types.CallToolResult) and drafted.is_error is not True

    anyio.run(second_run)
    assert again.visits == []  # signed in from the cache, no browser
    server.wait_for_audit(decision="deny", reason="insufficient_scope", target="probe_draft", subject="carol")
