"""Regenerates the lab's screenshots in `docs/images/` (the README's and `docs/lab.md`'s).

Each picture is taken of the page in the state it shows — a task's state machine lit while a draft
asks a question, the Tasks view with a completed draft and a cancelled evaluation, a simulation's
flow with the check that refused lit beside its audit record, the audit view folding a client's
polls, and the signed-out page naming the demo users — by driving Debian's Chromium through the
page as a person would, against a server with the small demo corpus the browser tests use.

    .venv/bin/python scripts/lab_screenshots.py            # writes docs/images/lab-*.png
    .venv/bin/python scripts/lab_screenshots.py --out DIR  # somewhere else

The browser tests run `take()` on every run (`tests/lab/test_screenshots.py`), so the script cannot
rot: a scene that no longer happens fails the tests. `AML_MCP_UPDATE_SCREENSHOTS=1 ./dev test
tests/lab` writes the pictures that run took into `docs/images/` too.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
WIDTH, HEIGHT = 980, 900
"""The window the pictures are taken in: narrow enough to read at the README's width unscaled."""
SHOTS = (
    "lab-signed-out.png",
    "lab-state-machine.png",
    "lab-tasks.png",
    "lab-authorization.png",
    "lab-audit.png",
)
PAD = 10


def _clip(
    page: Page, top: Locator, bottom: Locator | None = None, *, max_height: int | None = None
) -> dict[str, float]:
    """The page's region from `top`'s top to `bottom`'s bottom (default: `top`'s), padded."""
    first = top.bounding_box()
    last = (bottom or top).bounding_box()
    assert first is not None and last is not None, "the element to picture is not displayed"
    scrolled: float = page.evaluate("() => window.scrollY")  # the boxes are the window's, the clip the page's
    y = max(0.0, first["y"] + scrolled - PAD)
    height = last["y"] + scrolled + last["height"] + PAD - y
    if max_height is not None:
        height = min(height, max_height)
    width = page.viewport_size["width"] if page.viewport_size else WIDTH
    return {"x": 0, "y": y, "width": width, "height": height}


def _shoot(
    page: Page, out: Path, name: str, top: Locator, bottom: Locator | None = None, **kwargs: int
) -> Path:
    path = out / name
    page.screenshot(
        path=str(path), clip=_clip(page, top, bottom, **kwargs), full_page=True, animations="disabled"
    )
    return path


def take(browser: Browser, base_url: str, out: Path) -> list[Path]:
    """Drives the page through every scene and writes its picture into `out`; returns the paths."""
    # The browser tests' own steps: what a person does in the page (imported here so that the
    # script runs from the repository's root as well as under pytest).
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import expect
    from tests.lab.browser import (
        TASK_TIMEOUT_MS,
        answer_every_question,
        force_polling,
        open_tab,
        sign_in,
        start_task,
        state_of,
    )

    out.mkdir(parents=True, exist_ok=True)
    taken: list[Path] = []

    tab = open_tab(browser, base_url, width=WIDTH, height=HEIGHT)
    try:
        page = tab.page
        page.goto("/lab/")
        expect(page.locator("#demo-users tbody tr")).to_have_count(5)
        taken.append(
            _shoot(page, out, "lab-signed-out.png", page.locator("header.top"), page.locator("#welcome"))
        )

        sign_in(tab, "carol")
        cancelled = start_task(tab, "run_full_eval")
        cancelled.get_by_role("button", name="Cancel task").click()
        expect(state_of(cancelled)).to_have_text("cancelled", timeout=TASK_TIMEOUT_MS)
        page.locator("details[data-tool=run_full_eval] summary").click()  # closes its card again
        draft = start_task(tab, "draft_sar_batch", case_ids="MRD-C000001")
        expect(state_of(draft)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
        answer = draft.locator("fieldset input").first
        answer.fill("1958-11-30")
        answer.evaluate("node => node.blur()")
        page.wait_for_timeout(1500)  # the time in input_required counts up: let it show seconds
        taken.append(_shoot(page, out, "lab-state-machine.png", draft))
        answer_every_question(draft)
        expect(state_of(draft)).to_have_text("completed", timeout=TASK_TIMEOUT_MS)
        draft.locator(".task-detail").evaluate("node => node.hidden = true")  # the result is Tools' picture
        page.locator("details[data-tool=draft_sar_batch] summary").click()
        taken.append(_shoot(page, out, "lab-tasks.png", page.locator("#tasks")))
        draft.locator(".task-detail").evaluate("node => node.hidden = false")

        page.locator("#simulation-buttons button[data-case=wrong_audience]").click()
        panel = page.locator("#simulation-results article[data-case=wrong_audience]")
        expect(panel.locator("[data-lit=refused] .audit-record")).to_have_count(1)
        expect(panel.locator("[data-side=valid] .audit-record").first).to_be_visible(timeout=10_000)
        taken.append(_shoot(page, out, "lab-authorization.png", page.locator("#simulation-buttons"), panel))
        tab.assert_quiet_console()
    finally:
        tab.page.context.close()

    # The audit view while a client polls a task (the page polls when it cannot listen).
    tab = open_tab(browser, base_url, width=WIDTH, height=HEIGHT)
    try:
        page = tab.page
        sign_in(tab, "carol")
        force_polling(tab)
        waiting = start_task(tab, "draft_sar_batch", case_ids="MRD-C000001")
        expect(state_of(waiting)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
        polls = page.locator("#audit-rows tr[data-method='tasks/get'].folded").first
        ten_or_more = re.compile(r"^[1-9]\d+$")
        expect(polls).to_have_attribute("data-count", ten_or_more, timeout=20_000)
        waiting.get_by_role("button", name="Cancel task").click()
        expect(state_of(waiting)).to_have_text("cancelled", timeout=TASK_TIMEOUT_MS)
        page.locator("#audit").scroll_into_view_if_needed()
        rows = page.locator("#audit-rows tr")
        taken.append(
            _shoot(
                page,
                out,
                "lab-audit.png",
                page.locator("#audit-heading"),
                rows.nth(min(11, rows.count() - 1)),
            )
        )
        tab.assert_quiet_console()
    finally:
        tab.page.context.close()
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=IMAGES, help="where to write the pictures (default: docs/images)"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from playwright.sync_api import sync_playwright
    from tests.lab.browser import chromium_path
    from tests.lab.server import lab_server

    with (
        tempfile.TemporaryDirectory() as data_dir,
        lab_server(Path(data_dir)) as server,
        sync_playwright() as driver,
    ):
        browser = driver.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        try:
            for path in take(browser, server.url, args.out):
                print(path)
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
