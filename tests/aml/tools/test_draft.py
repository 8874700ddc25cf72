"""`draft_sar_batch` as a task (in-process HTTP): drafts, analyst questions, not-found cases, isolation."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import DemoNote
from aml_mcp.aml.notes.model import CaseNote
from tests.aml.tools.aml_client import A, AmlClient, B, aml_server, assert_matches_output_schema, cases_of
from tests.support.mcp_http import TASKS_ONLY
from tests.support.oauth import TestIssuer

DRAFT = "aml:draft"
_AMBIGUOUS = re.compile(r"involves accounts (.+?) and (.+?); it is not yet confirmed")


@pytest.fixture(scope="module")
def aml(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, demo_data: Path) -> Iterator[AmlClient]:
    with aml_server(tmp_path_factory.mktemp("aml-draft"), issuer, demo=demo_data) as client:
        yield client


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def _pick(cases: dict[str, list[CaseNote]]) -> tuple[str, str, str]:
    """A complete case, one lacking a date of birth, one whose subject's account is ambiguous."""
    complete = next(
        c for c, ns in cases.items() if all(s.date_of_birth and s.account_id for s in ns[0].subjects)
    )
    no_dob = next(
        c
        for c, ns in cases.items()
        if ns[0].subjects[0].date_of_birth is None and ns[0].subjects[0].account_id
    )
    ambiguous = next(
        c
        for c, ns in cases.items()
        if ns[0].subjects[0].account_id is None and ns[0].subjects[0].date_of_birth
    )
    return complete, no_dob, ambiguous


def _drafted(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["case_id"]: entry for entry in result["structuredContent"]["cases"]}


def test_input_required_then_update_then_completed(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    cases = cases_of(demo_notes[A])
    complete, no_dob, ambiguous = _pick(cases)
    foreign = next(iter(cases_of(demo_notes[B])))
    unknown = "MRD-C999999"
    task_id = aml.start(
        "draft_sar_batch",
        {"case_ids": [complete, no_dob, ambiguous, foreign, unknown, complete]},
        tenant=A,
        scope=DRAFT,
    )

    waiting = aml.wait_for(task_id, "input_required", tenant=A, scope=DRAFT)
    asked = waiting["inputRequests"]
    dob_subject = cases[no_dob][0].subjects[0]
    account_subject = cases[ambiguous][0].subjects[0]
    dob_key = f"dob:{no_dob}:{_slug(dob_subject.name)}"
    account_key = f"account:{ambiguous}:{_slug(account_subject.name)}"
    assert set(asked) == {dob_key, account_key}
    assert all(request["method"] == "elicitation/create" for request in asked.values())
    assert (
        no_dob in asked[dob_key]["params"]["message"]
        and dob_subject.name in asked[dob_key]["params"]["message"]
    )
    choices = asked[account_key]["params"]["requestedSchema"]["properties"]["account_id"]["enum"]
    named = next(m for n in cases[ambiguous] if (m := _AMBIGUOUS.search(n.text)))
    assert set(choices) == {named.group(1), named.group(2)}
    assert foreign not in str(asked)  # nothing is asked, or revealed, about another bank's case

    chosen = named.group(2)
    answers = {
        dob_key: {"action": "accept", "content": {"date_of_birth": "1961-04-02"}},
        account_key: {"action": "accept", "content": {"account_id": chosen}},
    }
    updated = aml.task("tasks/update", task_id, tenant=A, scope=DRAFT, inputResponses=answers)
    assert updated.status_code == 200, updated.text
    done = aml.wait_for(task_id, "completed", tenant=A, scope=DRAFT)
    result = done["result"]
    assert_matches_output_schema(aml.tools["draft_sar_batch"], result["structuredContent"])
    entries = _drafted(result)
    assert list(entries) == [complete, no_dob, ambiguous, foreign, unknown]  # duplicates drafted once
    assert result["structuredContent"] | {"cases": None} == {
        "cases": None,
        "drafted": 3,
        "not_found": 2,
        "passed": 3,
    }

    for case_id in (complete, no_dob, ambiguous):
        entry = entries[case_id]
        assert entry["status"] == "drafted" and entry["passed"] is True and entry["unanswered"] == []
        assert [c["name"] for c in entry["checks"] if not c["passed"]] == []
        draft = entry["draft"]
        assert draft["source_note_ids"] == [
            n.note_id for n in sorted(cases[case_id], key=lambda n: n.created_at)
        ]
        for section in ("who", "what", "when", "where", "why", "how"):
            assert draft["narrative"]["suspicious_activity"][section]
        assert "Law-enforcement contact" in entry["text"] and "Filing institution" in entry["text"]

    dob_entry = entries[no_dob]["draft"]["subjects"][0]
    assert (dob_entry["date_of_birth"], dob_entry["date_of_birth_source"]) == ("1961-04-02", "analyst")
    assert "1961-04-02 (analyst)" in entries[no_dob]["text"]
    account_entry = entries[ambiguous]["draft"]["subjects"][0]
    assert (account_entry["account_ids"], account_entry["account_source"]) == ([chosen], "analyst")

    # Unknown and foreign case ids get the very same answer, and no draft.
    assert {k: v for k, v in entries[foreign].items() if k != "case_id"} == {
        k: v for k, v in entries[unknown].items() if k != "case_id"
    }
    assert entries[foreign]["status"] == "not_found" and "draft" not in entries[foreign]


def test_a_declined_question_leaves_the_fact_missing_and_the_check_failing(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    _, no_dob, _ = _pick(cases_of(demo_notes[A]))
    task_id = aml.start("draft_sar_batch", {"case_ids": [no_dob]}, tenant=A, scope=DRAFT)
    (key,) = aml.wait_for(task_id, "input_required", tenant=A, scope=DRAFT)["inputRequests"]
    aml.task("tasks/update", task_id, tenant=A, scope=DRAFT, inputResponses={key: {"action": "decline"}})
    entry = _drafted(aml.wait_for(task_id, "completed", tenant=A, scope=DRAFT)["result"])[no_dob]
    assert entry["passed"] is False and entry["unanswered"] == [key]
    failed = {c["name"]: c["detail"] for c in entry["checks"] if not c["passed"]}
    assert list(failed) == ["required_fields"] and "date of birth" in failed["required_fields"]
    assert "[missing: date of birth]" in entry["text"]


def test_an_invalid_answer_counts_as_no_answer(aml: AmlClient, demo_notes: dict[str, list[DemoNote]]) -> None:
    _, _, ambiguous = _pick(cases_of(demo_notes[A]))
    task_id = aml.start("draft_sar_batch", {"case_ids": [ambiguous]}, tenant=A, scope=DRAFT)
    (key,) = aml.wait_for(task_id, "input_required", tenant=A, scope=DRAFT)["inputRequests"]
    foreign_account = next(s.account_id for d in demo_notes[B] for s in d.note.subjects if s.account_id)
    aml.task(
        "tasks/update",
        task_id,
        tenant=A,
        scope=DRAFT,
        inputResponses={key: {"action": "accept", "content": {"account_id": foreign_account}}},
    )
    entry = _drafted(aml.wait_for(task_id, "completed", tenant=A, scope=DRAFT)["result"])[ambiguous]
    assert entry["unanswered"] == [key] and entry["draft"]["subjects"][0]["account_ids"] == []
    assert foreign_account not in entry["text"]


def test_a_client_without_elicitation_is_not_asked(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    complete, no_dob, _ = _pick(cases_of(demo_notes[A]))
    task_id = aml.start(
        "draft_sar_batch", {"case_ids": [complete, no_dob]}, tenant=A, scope=DRAFT, capabilities=TASKS_ONLY
    )
    done = aml.wait_for(task_id, "completed", "input_required", tenant=A, scope=DRAFT)
    assert done["status"] == "completed"
    entries = _drafted(done["result"])
    assert entries[complete]["passed"] is True
    assert entries[no_dob]["passed"] is False and len(entries[no_dob]["unanswered"]) == 1


def test_only_foreign_cases_are_all_not_found_without_questions(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    foreign_cases = cases_of(demo_notes[B])
    _, no_dob, ambiguous = _pick(foreign_cases)  # cases that, in their own bank, would need answers
    task_id = aml.start("draft_sar_batch", {"case_ids": [no_dob, ambiguous]}, tenant=A, scope=DRAFT)
    done = aml.wait_for(task_id, "completed", "input_required", tenant=A, scope=DRAFT)
    assert done["status"] == "completed" and "inputRequests" not in done
    content = done["result"]["structuredContent"]
    assert (content["drafted"], content["not_found"]) == (0, 2)
    assert foreign_cases[no_dob][0].subjects[0].name not in str(done)

    # The owning bank drafts the same case ids (so they were real), and is asked about them.
    own = aml.start("draft_sar_batch", {"case_ids": [no_dob]}, tenant=B, scope=DRAFT)
    assert aml.wait_for(own, "input_required", tenant=B, scope=DRAFT)["inputRequests"]
    assert aml.task("tasks/cancel", own, tenant=B, scope=DRAFT).status_code == 200
    assert aml.wait_for(own, "cancelled", tenant=B, scope=DRAFT)["status"] == "cancelled"


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"case_ids": []}, "case_ids"),
        ({}, "case_ids"),
        ({"case_ids": ["MRD-C000001"], "tenant": B}, "tenant"),
        ({"case_ids": "MRD-C000001"}, "case_ids"),
        ({"case_ids": ["x" * 129]}, "case_ids"),
    ],
)
def test_bad_arguments_are_refused_before_any_task(
    aml: AmlClient, arguments: dict[str, Any], expected: str
) -> None:
    response = aml.call("draft_sar_batch", arguments, tenant=A, scope=DRAFT)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result.get("resultType") != "task" and result["isError"] is True
    assert expected in result["content"][0]["text"]


def test_without_the_tasks_extension_the_call_is_refused(aml: AmlClient) -> None:
    response = aml.call(
        "draft_sar_batch", {"case_ids": ["MRD-C000001"]}, tenant=A, scope=DRAFT, capabilities={}
    )
    assert response.json()["error"]["code"] == -32021
