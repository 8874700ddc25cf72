"""Debian's Chromium, driven by Playwright, as the lab's user: a real browser on a real socket.

No browser build is downloaded: Playwright drives the system's `chromium` (`apt-get install
chromium`; `.ci/run` installs it). Its absence fails the tests that need it — it is never a skip.
Every page records its console: a test ends by asserting there was no error in it.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page

SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "images"
"""Where the README's screenshots of the lab live; written when `AML_MCP_UPDATE_SCREENSHOTS=1`."""


def chromium_path() -> str:
    path = os.environ.get("AML_MCP_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail("Chromium is needed for the lab's browser tests: apt-get install chromium")
    return path


@dataclass
class Tab:
    """One signed-in (or not yet) page and what its console said."""

    page: Page
    console: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    """Network refusals the test provoked on purpose (the simulation's 401s and 403s)."""

    def assert_quiet_console(self) -> None:
        """No console errors, except the browser's own line for each refusal the test asked for."""
        unexpected = [line for line in self.console if not any(url in line for url in self.refusals)]
        assert unexpected == [], unexpected


def open_tab(browser: Browser, base_url: str, *, width: int = 1280, height: int = 800) -> Tab:
    context = browser.new_context(viewport={"width": width, "height": height}, base_url=base_url)
    page = context.new_page()
    tab = Tab(page)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            tab.console.append(f"{message.text} @ {message.location.get('url', '')}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: tab.console.append(f"uncaught: {error}"))
    return tab


def sign_in(tab: Tab, username: str) -> None:
    """Through the development authorization server's own login page, as a person would."""
    page = tab.page
    page.goto("/lab/")
    page.get_by_role("button", name="Sign in").click()
    page.get_by_label("User").fill(username)
    page.get_by_label("Password").fill(username)
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("#who [data-field=subject]")


def screenshot(page: Page, name: str, section: str) -> None:
    """The README's screenshots, regenerated from the test that shows the state they picture: the
    window at 1280x800, scrolled so that `section` (an element id) starts at the top."""
    page.locator(f"#{section}").evaluate("node => node.scrollIntoView()")
    image = page.screenshot(full_page=False)
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("AML_MCP_UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        (SCREENSHOTS / name).write_bytes(image)
