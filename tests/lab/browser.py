"""Debian's Chromium, driven by Playwright, as the lab's user: a real browser on a real socket.

No browser build is downloaded: Playwright drives the system's `chromium` (`apt-get install
chromium`; `.ci/run` installs it). Its absence fails the tests that need it — it is never a skip.
Every page records its console and every answer of 400 or more it received: a test ends by asserting
there was neither.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, Response, Route, expect


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
    refused: list[str] = field(default_factory=list)
    """Every answer of 400 or more the page received (`STATUS METHOD URL`)."""

    def assert_quiet_console(self) -> None:
        """No console errors, and no request the page made was refused: the page makes no request the
        user's token cannot make (the simulation's wrong requests are sent by the server itself)."""
        assert self.console == [], self.console
        assert self.refused == [], self.refused


def open_tab(browser: Browser, base_url: str, *, width: int = 1280, height: int = 800) -> Tab:
    context = browser.new_context(viewport={"width": width, "height": height}, base_url=base_url)
    page = context.new_page()
    tab = Tab(page)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            tab.console.append(f"{message.text} @ {message.location.get('url', '')}")

    def on_response(response: Response) -> None:
        if response.status >= 400:
            tab.refused.append(f"{response.status} {response.request.method} {response.url}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: tab.console.append(f"uncaught: {error}"))
    page.on("response", on_response)
    return tab


def sign_in(tab: Tab, username: str) -> None:
    """Through the development authorization server's own login page, as a person would."""
    page = tab.page
    page.goto("/lab/")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/oauth/"))
    page.get_by_label("User", exact=True).fill(username)
    page.get_by_label("Password").fill(username)
    page.get_by_role("button", name="Approve").click()
    page.wait_for_selector("#who [data-field=subject]")


TASK_TIMEOUT_MS = 30_000


def tool(tab: Tab, name: str) -> Locator:
    """The tool's card, opened."""
    card = tab.page.locator(f"details[data-tool={name}]")
    if not card.evaluate("node => node.open"):
        card.locator("summary").click()
    return card


def start_task(tab: Tab, name: str, **fields: str) -> Locator:
    """Calls a task tool from its form; returns the new card of the Tasks view."""
    cards = tab.page.locator("#task-list article.task")
    before = cards.count()
    card = tool(tab, name)
    for field_name, value in fields.items():
        card.get_by_label(re.compile(f"^{field_name}")).fill(value)
    card.get_by_role("button", name=f"Call {name}").click()
    expect(cards).to_have_count(before + 1)
    return cards.first


def state_of(task: Locator) -> Locator:
    """The state badge in a task card's header."""
    return task.locator(".task-title [data-state]")


def lit(task: Locator) -> Locator:
    """The state machine's lit node(s) in a task card."""
    return task.locator("svg.state-machine [data-lit]")


def answer_every_question(task: Locator, value: str = "1958-11-30") -> None:
    for form in task.locator("fieldset").all():
        form.locator("input").first.fill(value)
        form.get_by_role("button", name="Answer").click()


def record_lit_states(tab: Tab) -> None:
    """From now on, every state the Tasks view lights is recorded, in order, per task (the view is
    redrawn on each state it observes, so a state held for a few milliseconds is recorded too)."""
    tab.page.evaluate(
        """() => {
          window.__litStates = {};
          const list = document.getElementById("task-list");
          const look = () => {
            for (const card of list.querySelectorAll("article.task")) {
              const node = card.querySelector("svg.state-machine [data-lit]");
              if (!node) continue;
              const seen = (window.__litStates[card.dataset.taskId] ||= []);
              if (seen.at(-1) !== node.dataset.node) seen.push(node.dataset.node);
            }
          };
          new MutationObserver(look).observe(list, { childList: true, subtree: true, attributes: true });
        }"""
    )


def lit_states(tab: Tab, task: Locator) -> list[str]:
    task_id = task.get_attribute("data-task-id")
    states: list[str] = tab.page.evaluate("(id) => window.__litStates[id] || []", task_id)
    return states


def force_polling(tab: Tab) -> None:
    """Makes every `subscriptions/listen` of the page fail (a JSON-RPC error in a 200), so the Tasks
    view falls back to polling `tasks/get`, as it does when a stream cannot be had."""

    def refuse_listen(route: Route) -> None:
        if route.request.headers.get("mcp-method") != "subscriptions/listen":
            route.fallback()
            return
        route.fulfill(
            status=200,
            content_type="application/json",
            body='{"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message": "no stream here"}}',
        )

    tab.page.route("**/mcp", refuse_listen)
