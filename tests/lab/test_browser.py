"""The lab in Debian's Chromium: the signed-out page naming the demo users, sign-in, a search, the
state machine of a task lit state by state (a draft that asks, then completes; a cancelled
evaluation; progress when the server reports it), every authorization simulation drawn as the flow
of the design with the check that refused lit beside its audit record, the audit view folding polls
and filtering by task, another bank's analyst seeing none of it, and a user without `aml:admin`
whose page makes no request the token cannot make. Each test ends with an error-free console and
no refused request."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from playwright.sync_api import Browser, Route, expect

from tests.lab.browser import (
    TASK_TIMEOUT_MS,
    Tab,
    answer_every_question,
    force_polling,
    lit,
    lit_states,
    open_tab,
    record_lit_states,
    sign_in,
    start_task,
    state_of,
    tool,
)
from tests.support.oauth import SecuredServer

pytestmark = pytest.mark.slow


@pytest.fixture
def carol(browser: Browser, lab_server: SecuredServer) -> Iterator[Tab]:
    tab = open_tab(browser, lab_server.url)
    sign_in(tab, "carol")
    yield tab
    tab.page.context.close()


@pytest.fixture
def alice(browser: Browser, lab_server: SecuredServer) -> Iterator[Tab]:
    """Meridian Bank's analyst: aml:read and aml:draft, neither aml:eval nor aml:admin."""
    tab = open_tab(browser, lab_server.url)
    sign_in(tab, "alice")
    yield tab
    tab.page.context.close()


def test_the_signed_out_page_names_the_demo_users(browser: Browser, lab_server: SecuredServer) -> None:
    tab = open_tab(browser, lab_server.url)
    try:
        tab.page.goto("/lab/")
        users = tab.page.locator("#demo-users tbody tr")
        expect(users).to_have_count(5)
        for name in ("alice", "bob", "carol", "dave", "erin"):
            expect(tab.page.locator(f"#demo-users tr[data-user={name}]")).to_have_count(1)
        expect(tab.page.locator("#demo-users tr[data-user=carol]")).to_contain_text("aml:admin")
        expect(tab.page.locator("#welcome")).to_contain_text("password is its user name")
        expect(tab.page.locator("#lab")).to_be_hidden()
        tab.assert_quiet_console()
    finally:
        tab.page.context.close()


def test_sign_in_shows_who_you_are(carol: Tab, lab_server: SecuredServer) -> None:
    who = carol.page.locator("#who")
    expect(who.locator("[data-field=subject]")).to_have_text("carol")
    expect(who.locator("[data-field=bank]")).to_have_text("meridian-bank")
    expect(who.locator("[data-field=client]")).to_have_text("aml-mcp-lab")
    expect(who.locator("[data-field=scopes]")).to_contain_text("aml:admin")
    # One time zone on the whole page (UTC), said with every time.
    expect(who.locator("[data-field='token expires']")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d UTC \(in "))
    expect(carol.page.locator("#welcome")).to_be_hidden()
    # The page's own sign-in and calls are in the audit trail like any client's.
    lab_server.wait_for_audit(subject="carol", client_id="aml-mcp-lab", method="tools/list", decision="allow")
    carol.assert_quiet_console()


def test_search_renders_marked_hits(carol: Tab) -> None:
    card = tool(carol, "search_aml_notes")
    card.get_by_label(re.compile("^query")).fill("cash deposits under the reporting threshold")
    card.get_by_role("button", name="Call search_aml_notes").click()
    hits = carol.page.locator("#tool-result .hits li")
    expect(hits.first).to_be_visible()
    expect(carol.page.locator("#tool-result mark").first).to_be_visible()
    expect(carol.page.locator("#tool-result .hits li strong").first).to_have_text(re.compile(r"^MRD-"))
    carol.assert_quiet_console()


def test_the_state_machine_lights_working_then_input_required_then_completed(carol: Tab) -> None:
    record_lit_states(carol)
    task = start_task(carol, "draft_sar_batch", case_ids="MRD-C000001")
    expect(carol.page.locator("#follow-mode")).to_contain_text("listening")
    expect(state_of(task)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
    expect(lit(task)).to_have_count(1)
    expect(lit(task)).to_have_attribute("data-node", "input_required")
    expect(task.locator("[data-edge='working>input_required'][data-taken]")).to_have_count(1)
    answer_every_question(task)
    expect(state_of(task)).to_have_text("completed", timeout=TASK_TIMEOUT_MS)
    expect(lit(task)).to_have_attribute("data-node", "completed")
    expect(lit(task)).to_have_count(1)
    assert lit_states(carol, task) == ["working", "input_required", "working", "completed"]
    svg = task.locator("svg.state-machine")
    expect(svg).to_have_attribute("data-current", "completed")
    for edge in ("working>input_required", "input_required>working", "working>completed"):
        expect(svg.locator(f"[data-edge='{edge}']")).to_have_attribute("data-taken", "1")
    expect(svg.locator("[data-taken]")).to_have_count(3)  # and no other transition is drawn as taken
    expect(svg.locator("[data-node=failed].unvisited")).to_have_count(1)
    # The timeline: each state entered, with the time spent in it and the messages said in it.
    timeline = task.locator("ol.timeline > li")
    expect(timeline).to_have_count(4)
    for index, status in enumerate(["working", "input_required", "working", "completed"]):
        expect(timeline.nth(index)).to_have_attribute("data-status", status)
    expect(timeline.nth(1).locator(".spent")).to_have_text(re.compile(r"^\d+(\.\d)? (ms|s)$"))
    expect(timeline.last.locator(".spent")).to_have_text("final")
    expect(timeline.nth(1).locator(".messages")).not_to_be_empty()
    expect(task.locator(".checks li").first).to_be_visible()
    expect(task.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)
    carol.assert_quiet_console()


def test_a_cancelled_task_lights_cancelled(carol: Tab) -> None:
    record_lit_states(carol)
    task = start_task(carol, "run_full_eval")
    task.get_by_role("button", name=re.compile("^Cancel")).click()
    expect(state_of(task)).to_have_text("cancelled", timeout=TASK_TIMEOUT_MS)
    expect(lit(task)).to_have_attribute("data-node", "cancelled")
    expect(lit(task)).to_have_count(1)
    expect(task.locator("[data-edge='working>cancelled']")).to_have_attribute("data-taken", "1")
    assert lit_states(carol, task)[0] == "working"
    assert lit_states(carol, task)[-1] == "cancelled"
    expect(task.locator("ol.timeline > li").last).to_have_attribute("data-status", "cancelled")
    carol.assert_quiet_console()


def test_progress_is_drawn_when_the_server_reports_it(carol: Tab) -> None:
    """The stream is replaced by one that reports progress (`statusMessage` and `_meta`'s
    `aml-mcp/progress`), as the server does while a task works; the page draws the bar, the count
    and each message in the timeline, then follows the task by polling once the stream ends."""

    last: dict[str, object] = {}
    created: list[datetime] = []

    def progressing(route: Route) -> None:
        request = route.request
        method = request.headers.get("mcp-method")
        if method == "tools/call":  # the task's creation time: the reports follow it by milliseconds
            response = route.fetch()
            created.append(datetime.fromisoformat(response.json()["result"]["createdAt"]))
            route.fulfill(response=response)
            return
        if method == "tasks/get" and last:  # the polls after the stream: the last state it reported
            answer = {
                "jsonrpc": "2.0",
                "id": request.post_data_json["id"],
                "result": {**last, "resultType": "complete"},
            }
            route.fulfill(status=200, content_type="application/json", body=json.dumps(answer))
            return
        if method != "subscriptions/listen":
            route.fallback()
            return
        task_id = request.post_data_json["params"]["notifications"]["taskIds"][0]
        body = ""
        for step, done in enumerate((0, 34, 108, 244)):
            at = (created[-1] + timedelta(milliseconds=1 + step)).isoformat(timespec="milliseconds")
            state = {
                "taskId": task_id,
                "status": "working",
                "createdAt": at,
                "lastUpdatedAt": at,
                "statusMessage": f"drafted {done}/504" if done else "drafting 504 cases",
                "_meta": {"aml-mcp/progress": {"done": done, "total": 504}},
            }
            last.update(state)
            notification = {"jsonrpc": "2.0", "method": "notifications/tasks", "params": state}
            body += f"event: message\ndata: {json.dumps(notification)}\n\n"
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    carol.page.route("**/mcp", progressing)
    task = start_task(carol, "run_full_eval")
    progress = task.locator(".task-progress")
    expect(progress.locator(".progress-count")).to_have_text("244 / 504", timeout=TASK_TIMEOUT_MS)
    expect(progress.locator("progress")).to_have_attribute("max", "504")
    expect(progress.locator("progress")).to_have_attribute("value", "244")
    messages = task.locator("ol.timeline > li").first.locator(".messages li")
    expect(messages.last).to_contain_text("drafted 244/504")
    expect(task.locator(".messages")).to_contain_text("drafted 108/504")
    carol.page.unroute("**/mcp", progressing)
    task.get_by_role("button", name=re.compile("^Cancel")).click()
    expect(state_of(task)).to_have_text(re.compile("^(cancelled|completed)$"), timeout=TASK_TIMEOUT_MS)
    carol.assert_quiet_console()


SIMULATIONS = {
    # case: (the step lit, HTTP status, what the challenge or error says, the audit reason)
    "wrong_audience": ("audience", 401, 'error="invalid_token"', "wrong_audience"),
    "expired": ("validity", 401, 'error="invalid_token"', "expired"),
    "no_scope": ("scope", 403, 'error="insufficient_scope"', "insufficient_scope"),
    "no_token": ("discovery", 401, "resource_metadata=", "no_token"),
}


def test_each_simulation_lights_the_check_that_refused_it_beside_its_audit_record(carol: Tab) -> None:
    page = carol.page
    start_task(carol, "run_full_eval")  # the other bank's analyst will try to read it
    for case, (step, status, challenge, reason) in SIMULATIONS.items():
        page.locator(f"#simulation-buttons button[data-case={case}]").click()
        panel = page.locator(f"#simulation-results article[data-case={case}]").first
        expect(panel).to_have_attribute("data-refused-step", step)
        refused = panel.locator("[data-lit=refused]")
        expect(refused).to_have_count(1)
        expect(refused).to_have_attribute("data-step", step)
        expect(refused.locator(".http-status")).to_have_text(str(status))
        expect(refused.locator(".challenge")).to_contain_text(challenge)
        # The audit record of the refusal sits beside the check that refused.
        expect(refused.locator(f".audit-record[data-decision=deny][data-reason={reason}]")).to_have_count(1)
        # The same request with the user's own token passes every check.
        valid = panel.locator("[data-side=valid]")
        expect(valid.locator(".http-status")).to_have_text("200")
        expect(valid.locator(".audit-record[data-decision=allow]").first).to_be_visible(timeout=10_000)
    wrong = page.locator("#simulation-results article[data-case=wrong_audience]")
    expect(wrong.locator("[data-step=token]")).to_have_attribute("data-outcome", "flawed")
    expect(wrong.locator("[data-step=issuer]")).to_have_attribute("data-outcome", "passed")
    expect(wrong.locator("[data-step=scope]")).to_have_attribute("data-outcome", "unreached")
    # The refusal's record says which audience the token claimed.
    expect(wrong.locator("[data-lit=refused]")).to_contain_text("another-server.example")

    page.locator("#simulation-buttons button[data-case=other_bank]").click()
    panel = page.locator("#simulation-results article[data-case=other_bank]").first
    # Every check passes; the handler answers as for an id that never existed: nothing tells another
    # bank the task exists. Its refusal is the request's one audit record (no allow beside the gate).
    refused = panel.locator("[data-lit=refused]")
    expect(refused).to_have_attribute("data-step", "handler")
    expect(refused.locator(".http-status")).to_have_text("400")
    expect(refused).to_contain_text("-32602: Task not found")
    expect(refused.locator(".audit-record[data-decision=deny][data-reason=not_found]")).to_have_count(1)
    flawed = panel.locator("[data-side=flawed]")
    expect(flawed.locator("[data-step=scope]")).to_have_attribute("data-outcome", "passed")
    expect(flawed.locator(".audit-record[data-decision=allow]")).to_have_count(0)
    expect(panel.locator("[data-side=valid]")).not_to_contain_text("Task not found")
    # Only the newest case stays open.
    expect(page.locator("#simulation-results details.simulation[open]")).to_have_count(1)
    carol.assert_quiet_console()


def test_the_audit_view_folds_polls_and_filters_by_task(carol: Tab) -> None:
    page = carol.page
    force_polling(carol)
    task = start_task(carol, "draft_sar_batch", case_ids="MRD-C000001")
    expect(page.locator("#follow-mode")).to_have_text("polling tasks/get", timeout=10_000)
    expect(state_of(task)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
    reference = (task.get_attribute("data-task-id") or "")[:8]
    # The page polls tasks/get every 200 ms while the draft waits: one row, counting up.
    polls = page.locator("#audit-rows tr[data-method='tasks/get'][data-decision=allow]").filter(
        has=page.locator(f"td[data-col=target]:text-is('{reference}')")
    )
    expect(polls.first).to_be_visible(timeout=10_000)
    expect(polls.first).to_have_attribute("data-count", re.compile(r"^([4-9]|\d\d+)$"), timeout=10_000)
    first = int(polls.first.get_attribute("data-count") or "0")
    expect(polls.first).not_to_have_attribute("data-count", str(first), timeout=10_000)  # it counts up
    assert polls.count() == 1  # one row, not a wall
    # The count cell: a multiplication sign and the number of records folded.
    expect(polls.first.locator("td[data-col=count]")).to_have_text(re.compile(r"^\u00d7\d+$"))
    expect(polls.first.locator("td[data-col=time]")).to_have_text(
        re.compile(r"^\d\d:\d\d:\d\d(\u2013\d\d:\d\d:\d\d)?$")
    )
    expect(page.locator("#audit-table th").nth(1)).to_have_text("Time (UTC)")
    # The task filter, from the card: only this task's records (its creation, the polls, the answers).
    task.get_by_role("button", name="Audit records").click()
    task_id = task.get_attribute("data-task-id") or ""
    expect(page.locator("#audit-filters input[name=task]")).to_have_value(task_id)
    targets = page.locator("#audit-rows td[data-col=target]")
    expect(targets.first).to_be_visible()
    assert set(targets.all_inner_texts()) == {reference}
    methods = set(page.locator("#audit-rows td[data-col=method]").all_inner_texts())
    assert {"tools/call", "tasks/get"} <= methods
    answer_every_question(task)
    expect(state_of(task)).to_have_text("completed", timeout=TASK_TIMEOUT_MS)
    expect(page.locator("#audit-rows tr[data-method='tasks/update']").first).to_be_visible(timeout=10_000)
    carol.assert_quiet_console()


def test_another_bank_sees_neither_tasks_nor_audit_events(
    carol: Tab, browser: Browser, lab_server: SecuredServer
) -> None:
    start_task(carol, "run_full_eval")
    erin = open_tab(browser, lab_server.url)
    try:
        sign_in(erin, "erin")
        expect(erin.page.locator("#who [data-field=bank]")).to_have_text("harbour-trust")
        expect(erin.page.locator("#task-list article.task")).to_have_count(0)
        rows = erin.page.locator("#audit-rows tr")
        expect(rows.first).to_be_visible(timeout=10_000)  # her own sign-in's calls, at least
        subjects = rows.locator("td[data-col=subject]").all_inner_texts()
        assert "carol" not in subjects
        assert set(subjects) <= {"erin", "—"}  # not even the simulated analysts carol sent
        erin.assert_quiet_console()
    finally:
        erin.page.context.close()
    carol.assert_quiet_console()


def test_a_user_without_admin_makes_no_request_her_token_cannot_make(alice: Tab) -> None:
    page = alice.page
    requests: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    # The audit view is hidden, and the page says why, without asking for it.
    note = page.locator("#audit-note")
    expect(note).to_contain_text("needs aml:admin")
    expect(note).to_contain_text("did not grant it")
    expect(page.locator("#audit-table")).to_be_hidden()
    # A scope the authorization server withheld at sign-in: said, and no step-up loop offered (F13).
    card = tool(alice, "run_full_eval")
    expect(card.locator("[data-withheld='aml:eval']")).to_contain_text("did not grant it")
    expect(card.get_by_role("button", name=re.compile("^Ask for"))).to_have_count(0)
    expect(card.get_by_role("button", name="Call run_full_eval")).to_be_disabled()
    # What her scopes allow works: a draft, answered, and every simulation (the valid comparison too).
    task = start_task(alice, "draft_sar_batch", case_ids="MRD-C000001")
    expect(state_of(task)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
    answer_every_question(task)
    expect(state_of(task)).to_have_text("completed", timeout=TASK_TIMEOUT_MS)
    expect(task.get_by_role("button", name="Audit records")).to_have_count(0)
    for case in ("wrong_audience", "expired", "no_scope", "no_token", "other_bank"):
        page.locator(f"#simulation-buttons button[data-case={case}]").click()
        panel = page.locator(f"#simulation-results article[data-case={case}]").first
        expect(panel.locator("[data-lit=refused] .audit-record[data-decision=deny]")).to_have_count(1)
        expect(panel.locator("[data-side=valid] .http-status")).to_have_text("200")
        expect(panel.locator("[data-side=valid]")).to_contain_text("audit view")
    assert [url for url in requests if "/lab/api/audit" in url] == []
    alice.assert_quiet_console()


def test_a_step_up_the_authorization_server_refuses_is_said_not_offered_again(alice: Tab) -> None:
    """F13: a scope the page never asked for is offered as a step-up; when the authorization server
    does not grant it (alice does not hold aml:eval), the page says so and offers no second loop."""
    page = alice.page
    # A session that never asked for aml:eval (the page asks for every scope at sign-in).
    page.evaluate(
        """() => {
          const key = "aml-mcp-lab/session";
          const session = JSON.parse(sessionStorage.getItem(key));
          session.asked = session.asked.filter((scope) => scope !== "aml:eval");
          sessionStorage.setItem(key, JSON.stringify(session));
        }"""
    )
    page.reload()
    card = tool(alice, "run_full_eval")
    card.get_by_role("button", name="Ask for aml:eval").click()
    page.wait_for_url(re.compile(r"/oauth/"))
    page.get_by_label("User", exact=True).fill("alice")
    page.get_by_label("Password").fill("alice")
    page.get_by_role("button", name="Approve").click()
    expect(page.locator("#status")).to_contain_text("did not grant aml:eval")
    expect(page.locator("#who [data-field=scopes]")).not_to_contain_text("aml:eval")
    card = tool(alice, "run_full_eval")
    expect(card.locator("[data-withheld='aml:eval']")).to_be_visible()
    expect(card.get_by_role("button", name=re.compile("^Ask for"))).to_have_count(0)
    alice.assert_quiet_console()


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
        # The keyboard reaches a tool and calls it.
        page.locator("details[data-tool=search_aml_notes] summary").focus()
        page.keyboard.press("Enter")
        query = page.locator("details[data-tool=search_aml_notes]").get_by_label(re.compile("^query"))
        query.focus()
        page.keyboard.type("structuring")
        page.keyboard.press("Enter")
        expect(page.locator("#tool-result .hits li").first).to_be_visible()
        # A task's state machine and a simulation's flow fit the narrow window too.
        task = start_task(tab, "draft_sar_batch", case_ids="MRD-C000001")
        expect(state_of(task)).to_have_text("input_required", timeout=TASK_TIMEOUT_MS)
        machine = task.locator("svg.state-machine")
        expect(machine).to_have_accessible_name(re.compile("Current state: input_required"))
        page.locator("#simulation-buttons button[data-case=wrong_audience]").click()
        expect(page.locator("#simulation-results [data-lit=refused]")).to_have_count(1)
        assert page.evaluate("() => document.scrollingElement.scrollWidth <= window.innerWidth + 1")
        tab.assert_quiet_console()
    finally:
        tab.page.context.close()
