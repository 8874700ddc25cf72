"""The analyst's questions: which facts a SAR still lacks, and answers checked, never trusted."""

from __future__ import annotations

from typing import Any

import pytest

from aml_mcp.aml.sar.facts import build_case_file
from aml_mcp.aml.sar.questions import FactKind, MissingFact, missing_facts, read_answers
from tests.aml.sar.sample_case import NOTES


def test_missing_facts_ask_for_an_individuals_account_and_birth_date_only() -> None:
    facts = missing_facts(build_case_file("T-C1", NOTES))
    assert [(f.kind, f.key) for f in facts] == [
        (FactKind.ACCOUNT, "account:T-C1:ana-p-reyes"),
        (FactKind.DATE_OF_BIRTH, "dob:T-C1:ana-p-reyes"),
    ]
    account, dob = facts
    schema = account.request()["params"]["requestedSchema"]
    assert schema["properties"]["account_id"]["enum"] == ["1111-222-33333"]
    assert dob.request()["params"]["requestedSchema"]["properties"]["date_of_birth"]["format"] == "date"


@pytest.mark.parametrize(
    ("kind", "answer", "expected"),
    [
        (
            FactKind.DATE_OF_BIRTH,
            {"action": "accept", "content": {"date_of_birth": "1980-02-29"}},
            "1980-02-29",
        ),
        (FactKind.DATE_OF_BIRTH, {"action": "accept", "content": {"date_of_birth": "1981-02-29"}}, None),
        (FactKind.DATE_OF_BIRTH, {"action": "accept", "content": {"date_of_birth": "2999-01-01"}}, None),
        (FactKind.DATE_OF_BIRTH, {"action": "accept", "content": {"date_of_birth": "1850-01-01"}}, None),
        (FactKind.DATE_OF_BIRTH, {"action": "decline"}, None),
        (FactKind.DATE_OF_BIRTH, "yes", None),
        (
            FactKind.ACCOUNT,
            {"action": "accept", "content": {"account_id": "1111-222-33333"}},
            "1111-222-33333",
        ),
        (FactKind.ACCOUNT, {"action": "accept", "content": {"account_id": "9999-999-99999"}}, None),
        (FactKind.ACCOUNT, {"action": "cancel", "content": {"account_id": "1111-222-33333"}}, None),
    ],
)
def test_answers_are_checked_not_trusted(kind: FactKind, answer: Any, expected: str | None) -> None:
    subject = build_case_file("T-C1", NOTES).subjects[0]
    fact = MissingFact(kind, "T-C1", subject, ("1111-222-33333",) if kind is FactKind.ACCOUNT else ())
    assert fact.read(answer) == expected
    assert read_answers([fact], {fact.key: answer}) == ({} if expected is None else {fact.key: expected})


def test_free_entry_accounts_must_look_like_accounts() -> None:
    subject = build_case_file("T-C1", NOTES).subjects[0]
    fact = MissingFact(FactKind.ACCOUNT, "T-C1", subject)
    assert fact.read({"action": "accept", "content": {"account_id": " AC-7781-0001 "}}) == "AC-7781-0001"
    assert fact.read({"action": "accept", "content": {"account_id": "x"}}) is None
    assert fact.read({"action": "accept", "content": {"account_id": "<script>"}}) is None
