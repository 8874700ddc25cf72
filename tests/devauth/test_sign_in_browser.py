"""The hardened sign-in page still works in a real browser (Debian's Chromium, through Playwright).

Its CSP allows no script and only the page's own inline style, by hash, and `form-action` limits
where the consent form may go, including the redirect that answers it (browsers check that too).
Here a person signs in as the command-line client would have them do: the page is styled (the
hashed style applied), the consent post is answered with a redirect to a callback on another
loopback port, and the browser follows it, with no CSP violation on the console. And another
site cannot frame the page. Chromium's absence fails these tests; it is never a skip.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, sync_playwright
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse
from starlette.routing import Route

from aml_mcp.devauth.wiring import CLI_CLIENT_ID
from tests.lab.browser import chromium_path
from tests.support.dev_issuer import dev_issuer_server, pkce
from tests.support.live_server import LiveServer
from tests.support.oauth import SecuredServer


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("sign-in-browser")
    with dev_issuer_server(data_dir) as running:
        yield running


class Elsewhere:
    """Another loopback origin: the client's callback, and a page that tries to frame the issuer's."""

    def __init__(self) -> None:
        self.callbacks: list[dict[str, str]] = []
        self.frame_target = ""
        app = Starlette(routes=[Route("/callback", self._callback), Route("/framing", self._framing)])
        self.live = LiveServer(app)

    async def _callback(self, request: Request) -> PlainTextResponse:
        self.callbacks.append(dict(request.query_params))
        return PlainTextResponse("signed in")

    async def _framing(self, request: Request) -> HTMLResponse:
        return HTMLResponse(f"<!doctype html><iframe id='victim' src='{self.frame_target}'></iframe>")


@pytest.fixture
def elsewhere() -> Iterator[Elsewhere]:
    site = Elsewhere()
    with site.live:
        yield site


def _console(page: Page) -> list[str]:
    lines: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type in {"error", "warning"}:
            lines.append(message.text)

    page.on("console", on_console)
    page.on("pageerror", lambda error: lines.append(f"uncaught: {error}"))
    return lines


def _authorize_url(server: SecuredServer, redirect_uri: str) -> str:
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": CLI_CLIENT_ID,
        "redirect_uri": redirect_uri,
        "scope": "aml:read",
        "state": "browser-state",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    return f"{server.url}/oauth/authorize?{urlencode(query)}"


def test_a_person_signs_in_and_is_sent_back_to_a_client_on_another_port(
    browser: Browser, server: SecuredServer, elsewhere: Elsewhere
) -> None:
    context = browser.new_context()
    page = context.new_page()
    console = _console(page)
    try:
        page.goto(_authorize_url(server, f"{elsewhere.live.url}/callback"))
        # The hashed inline style applies (a blocked one would leave the body at full width).
        assert page.evaluate("getComputedStyle(document.body).maxWidth") != "none"
        page.get_by_label("User").fill("alice")
        page.get_by_label("Password").fill("alice")
        page.get_by_role("button", name="Approve").click()
        page.wait_for_url(f"{elsewhere.live.url}/callback?**", timeout=10_000)
        assert page.text_content("body") == "signed in"
    finally:
        context.close()
    assert len(elsewhere.callbacks) == 1
    assert elsewhere.callbacks[0]["state"] == "browser-state" and elsewhere.callbacks[0]["code"]
    assert not [line for line in console if "Content Security Policy" in line], console


def test_another_site_cannot_frame_the_consent_page(
    browser: Browser, server: SecuredServer, elsewhere: Elsewhere
) -> None:
    elsewhere.frame_target = _authorize_url(server, f"{elsewhere.live.url}/callback")
    context = browser.new_context()
    page = context.new_page()
    console = _console(page)
    try:
        page.goto(f"{elsewhere.live.url}/framing", wait_until="load")
        frames = [frame for frame in page.frames if frame != page.main_frame]
        assert len(frames) == 1
        # The browser refused to render it: an error document instead of the consent form.
        assert frames[0].url.startswith("chrome-error://"), frames[0].url
        assert page.frame_locator("#victim").get_by_role("button", name="Approve").count() == 0
    finally:
        context.close()
    assert any("frame-ancestors" in line or "X-Frame-Options" in line for line in console), console
