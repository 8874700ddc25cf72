"""The lab in Debian's Chromium: sign in, search, a task through `input_required` to `completed`, a
cancelled evaluation, every authorization simulation with its audit record, and another bank's
analyst seeing none of it. Each test ends with an error-free console."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Locator, expect

from tests.lab.browser import Tab, open_tab, screenshot, sign_in
from tests.support.oauth import SecuredServer

pytestmark = pytest.mark.slow

TASK_TIMEOUT_MS = 30_000


@pytest.fixture
def carol(browser: Browser, lab_server: SecuredServer) -> Iterator[Tab]:
    tab = open_tab(browser, lab_server.url)
    sign_in(tab, "carol")
    yield tab
    tab.page.context.close()


def tool(tab: Tab, name: str) -> Locator:
    card = tab.page.locator(f"details[data-tool={name}]")
    if not card.evaluate("node => node.open"):
        card.locator("summary").click()
    return card


def start_task(tab: Tab, name: str, **fields: str) -> Locator:
    """Calls a task tool from its form; returns the new row of the Tasks timeline."""
    rows = tab.page.locator("#task-rows tr")
    before = rows.count()
    card = tool(tab, name)
    for field, value in fields.items():
        card.get_by_label(re.compile(f"^{field}")).fill(value)
    card.get_by_role("button", name=f"Call {name}").click()
    expect(rows).to_have_count(before + 1)
    return rows.first


def state_of(row: Locator) -> Locator:
    return row.locator("[data-state]")


def test_sign_in_shows_who_you_are(carol: Tab, lab_server: SecuredServer) -> None:
    who = carol.page.locator("#who")
    expect(who.locator("[data-field=subject]")).to_have_text("carol")
    expect(who.locator("[data-field=bank]")).to_have_text("meridian-bank")
    expect(who.locator("[data-field=client]")).to_have_text("aml-mcp-lab")
    expect(who.locator("[data-field=scopes]")).to_contain_text("aml:admin")
    expect(who.locator("[data-field='token expires']")).to_have_text(re.compile(r"\d"))
    # The page's own sign-in and calls are in the audit trail like any client's.
    lab_server.wait_for_audit(subject="carol", client_id="aml-mcp-lab", method="tools/list", decision="allow")
    carol.assert_quiet_console()


def test_search_renders_marked_hits(carol: Tab) -> None:
    card = tool(carol, "search_aml_notes")
    card.get_by_label(re.compile("^query")).fill("cash deposits under the reporting threshold")
    card.get_by_role("button", name="Call search_aml_notes").click()
    hits = carol.page.locator("#tool-result .hits li")
    expect(hits.first).to_be_visible()
    assert hits.count() >= 1
    expect(carol.page.locator("#tool-result mark").first).to_be_visible()
    expect(carol.page.locator("#tool-result .hits li strong").first).to_have_text(re.compile(r"^MRD-"))
    carol.assert_quiet_console()


def test_a_draft_is_answered_in_the_page_and_completes(carol: Tab) -> None:
    row = start_task(carol, "draft_sar_batch", case_ids="MRD-C000001")
    expect(carol.page.locator("#follow-mode")).to_contain_text("listening")
    expect(state_of(row)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
    for form in row.locator("fieldset").all():
        form.locator("input").first.fill("1958-11-30")
        form.get_by_role("button", name="Answer").click()
    expect(state_of(row)).to_have_text("completed", timeout=TASK_TIMEOUT_MS)
    timeline = row.locator("ol.timeline li")
    expect(timeline.first).to_contain_text("working")
    expect(timeline.nth(1)).to_contain_text("input_required")
    expect(timeline.last).to_contain_text("completed")
    expect(row.locator(".checks li").first).to_be_visible()
    expect(row.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)
    screenshot(carol.page, "lab-tasks.png", "tasks")
    carol.assert_quiet_console()


def test_an_evaluation_is_cancelled(carol: Tab) -> None:
    row = start_task(carol, "run_full_eval")
    row.get_by_role("button", name=re.compile("^Cancel")).click()
    expect(state_of(row)).to_have_text("cancelled", timeout=TASK_TIMEOUT_MS)
    expect(row.locator("ol.timeline li").last).to_contain_text("cancelled")
    carol.assert_quiet_console()


SIMULATIONS = {
    # case: (HTTP status of the flawed request, what its challenge or error says, audit reason pattern)
    "wrong_audience": (401, 'error="invalid_token"', r"."),
    "expired": (401, 'error="invalid_token"', r"expired"),
    "no_scope": (403, 'error="insufficient_scope"', r"^insufficient_scope$"),
    "no_token": (401, "resource_metadata=", r"^no_token$"),
}


def test_each_authorization_simulation_is_refused_with_its_audit_record(
    carol: Tab, lab_server: SecuredServer
) -> None:
    page = carol.page
    start_task(carol, "run_full_eval")  # the other bank's analyst will try to read it
    carol.refusals.append(f"{lab_server.url}/mcp")
    for case, (status, challenge, reason) in SIMULATIONS.items():
        page.locator(f"#simulation-buttons button[data-case={case}]").click()
        panel = page.locator(f"#simulation-results article[data-case={case}]").first
        flawed, valid = panel.locator("[data-side=flawed]"), panel.locator("[data-side=valid]")
        expect(flawed.locator(".http-status")).to_have_text(str(status))
        expect(flawed.locator(".challenge")).to_contain_text(challenge)
        expect(valid.locator(".http-status")).to_have_text("200")
        expect(flawed.locator(".audit-record[data-decision=deny]")).to_have_count(1, timeout=10_000)
        assert re.search(reason, flawed.locator(".audit-record").get_attribute("data-reason") or "")
        expect(valid.locator(".audit-record[data-decision=allow]")).to_have_count(1, timeout=10_000)
        if case == "wrong_audience":  # the load-bearing wall, for the README
            screenshot(page, "lab-authorization.png", "authorization")
    page.locator("#simulation-buttons button[data-case=other_bank]").click()
    panel = page.locator("#simulation-results article[data-case=other_bank]").first
    flawed = panel.locator("[data-side=flawed]")
    # The same answer as for an id that never existed: nothing tells another bank the task exists.
    expect(flawed.locator(".http-status")).to_have_text("400")
    expect(flawed).to_contain_text("-32602: Task not found")
    expect(flawed.locator(".audit-record[data-decision=deny]")).to_have_count(1, timeout=10_000)
    expect(panel.locator("[data-side=valid]")).not_to_contain_text("Task not found")
    carol.assert_quiet_console()


def test_another_bank_sees_neither_tasks_nor_audit_events(
    carol: Tab, browser: Browser, lab_server: SecuredServer
) -> None:
    start_task(carol, "run_full_eval")
    erin = open_tab(browser, lab_server.url)
    try:
        sign_in(erin, "erin")
        expect(erin.page.locator("#who [data-field=bank]")).to_have_text("harbour-trust")
        expect(erin.page.locator("#task-rows tr")).to_have_count(0)
        rows = erin.page.locator("#audit-rows tr")
        expect(rows.first).to_be_visible(timeout=10_000)  # her own sign-in's calls, at least
        subjects = rows.locator("td:nth-child(5)").all_inner_texts()
        assert "carol" not in subjects
        assert set(subjects) <= {"erin", "—"}  # not even the simulated analysts carol sent
        erin.assert_quiet_console()
    finally:
        erin.page.context.close()
    carol.assert_quiet_console()


def test_a_scope_you_lack_offers_the_step_up(browser: Browser, lab_server: SecuredServer) -> None:
    alice = open_tab(browser, lab_server.url)
    try:
        sign_in(alice, "alice")
        card = tool(alice, "run_full_eval")
        expect(card.locator(".needs-scope")).to_contain_text("aml:eval")
        expect(card.get_by_role("button", name="Ask for aml:eval")).to_have_count(1)
        expect(alice.page.locator("#audit-note")).to_contain_text("aml:admin")
        alice.refusals.append(f"{lab_server.url}/lab/api/audit")  # alice lacks the audit scope: a 403
        alice.assert_quiet_console()
    finally:
        alice.page.context.close()


def test_landmarks_labels_keyboard_and_a_narrow_window(browser: Browser, lab_server: SecuredServer) -> None:
    tab = open_tab(browser, lab_server.url, width=420, height=800)
    try:
        sign_in(tab, "carol")
        page = tab.page
        for heading in ("Tools", "Tasks", "Authorization", "Audit"):
            expect(page.get_by_role("region", name=heading)).to_have_count(1)
            expect(page.get_by_role("heading", name=heading, level=2)).to_be_visible()
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea')]
                 .filter((c) => c.labels.length === 0).map((c) => c.name || c.id)"""
        )
        assert unlabelled == []
        assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth + 1")
        # The keyboard reaches a tool and calls it.
        page.locator("details[data-tool=search_aml_notes] summary").focus()
        page.keyboard.press("Enter")
        query = page.locator("details[data-tool=search_aml_notes]").get_by_label(re.compile("^query"))
        query.focus()
        page.keyboard.type("structuring")
        page.keyboard.press("Enter")
        expect(page.locator("#tool-result .hits li").first).to_be_visible()
        tab.assert_quiet_console()
    finally:
        tab.page.context.close()
