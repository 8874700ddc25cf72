"""The lab's browser tests share one Chromium and one server (the AML tools on a small demo corpus)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Playwright, sync_playwright

from tests.lab.browser import chromium_path
from tests.lab.server import lab_server as serve_lab
from tests.support.oauth import SecuredServer


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
    """The lab's server (see `tests.lab.server`), one for the module's tests."""
    with serve_lab(tmp_path_factory.mktemp("lab-browser")) as server:
        yield server
