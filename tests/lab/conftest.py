"""The lab's browser tests share one Chromium and one server (the AML tools on a small demo corpus)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.tasks.settings import TaskSettings
from tests.lab.browser import chromium_path
from tests.support.oauth import SecuredServer, secured_server

NOTES_PER_BANK = 150


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    # Module scope, not session: the sync API keeps an event loop running on this thread while it is
    # open, and the tests after these (which run loops of their own) must not find it there.
    with sync_playwright() as running:
        yield running


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    launched = playwright.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def lab_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    """`aml-mcp serve`'s app with its defaults that matter here: the AML tools, the development
    authorization server and so the lab, on a real socket (the browser is a real client)."""
    data_dir = tmp_path_factory.mktemp("lab-browser")
    aml = AmlSettings(
        demo_notes_per_tenant=NOTES_PER_BANK, embedder="static"
    )  # search quality is not the point here
    load_demo_if_empty(aml, data_dir)
    tasks = TaskSettings(poll_interval_ms=200, heartbeat_ms=200, lease_ms=2000, claim_interval_ms=500)
    with secured_server(data_dir, None, dev=True, aml=aml, tasks=tasks, real_socket=True) as server:  # type: ignore[arg-type]
        yield server
