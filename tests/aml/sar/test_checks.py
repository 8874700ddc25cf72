"""The code checks on a drafted SAR: a complete draft passes them all, each fault is caught by its own."""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from typing import Any

from aml_mcp.aml.notes.model import normalise_identifier
from aml_mcp.aml.sar.checks import CHECKS, CheckSuite, dates_in, foreign_candidates, money_figures
from aml_mcp.aml.sar.draft import TYPOLOGY_LABELS, SarDraft, TemplateDrafter
from aml_mcp.aml.sar.facts import build_case_file
from aml_mcp.aml.sar.foreign_ids import draft_candidates
from tests.aml.sar.sample_case import NOTES

SUITE = CheckSuite(frozenset(TYPOLOGY_LABELS))


def _draft(answers: dict[str, str] | None = None) -> tuple[SarDraft, Any]:
    case = build_case_file("T-C1", NOTES)
    given = (
        answers
        if answers is not None
        else {"account:T-C1:ana-p-reyes": "1111-222-33333", "dob:T-C1:ana-p-reyes": "1977-07-07"}
    )
    return TemplateDrafter().draft(case, given), case


def _failed(draft: SarDraft, case: Any, foreign: set[str] | None = None) -> dict[str, str]:
    return {c.name: c.detail for c in SUITE.run(draft, case, foreign or set()) if not c.passed}


def test_a_complete_draft_passes_every_check_in_order() -> None:
    draft, case = _draft()
    results = SUITE.run(draft, case, set())
    assert [c.name for c in results] == list(CHECKS) and all(c.passed for c in results)
    assert draft.total_amount == "48000.00" and (draft.activity_start, draft.activity_end) == (
        "2024-03-04",
        "2024-03-10",
    )
    assert "Recommend" not in draft.text()  # case-handling sentences are not narrative


def test_accounts_the_analyst_typed_are_never_looked_up_in_other_banks() -> None:
    draft, _ = _draft()
    candidates = foreign_candidates(draft)
    assert normalise_identifier("1111-222-33333") not in candidates  # the analyst's answer
    assert normalise_identifier("0042-318-77651") in candidates  # from the notes: still checked


def test_missing_answers_fail_required_fields_only() -> None:
    draft, case = _draft({})
    failed = _failed(draft, case)
    assert list(failed) == ["required_fields"]
    assert (
        "account of Ana P. Reyes" in failed["required_fields"]
        and "date of birth of Ana P. Reyes" in failed["required_fields"]
    )


def test_each_check_catches_its_own_kind_of_fault() -> None:
    draft, case = _draft()
    summary = draft.narrative.suspicious_activity
    faults = {
        "amounts_consistent": draft.model_copy(update={"total_amount": "48001.00"}),
        "dates_consistent": draft.model_copy(update={"activity_start": "2024-03-01"}),
        "dates_in_case_window": draft.model_copy(
            update={
                "narrative": draft.narrative.model_copy(
                    update={
                        "suspicious_activity": summary.model_copy(update={"when": "On 2023-12-31 and after."})
                    }
                )
            }
        ),
        "typology_codes_valid": draft.model_copy(update={"typologies": ["structuring", "made_up"]}),
        "narrative_5w1h": draft.model_copy(
            update={
                "narrative": draft.narrative.model_copy(
                    update={
                        "suspicious_activity": summary.model_copy(
                            update={"who": "Someone, somewhere, did things."}
                        )
                    }
                )
            }
        ),
    }
    for check, faulty in faults.items():
        assert check in _failed(faulty, case), check
    stray = draft.model_copy(
        update={
            "narrative": draft.narrative.model_copy(
                update={
                    "suspicious_activity": summary.model_copy(update={"how": "Moved USD 77,777.00 offshore."})
                }
            )
        }
    )
    assert "77,777.00" in _failed(stray, case)["amounts_consistent"]
    assert _failed(draft, case, {"0042318"}) == {
        "no_foreign_identifiers": "1 identifier(s) in the draft belong to another institution's records"
    }


def test_money_dates_and_candidates_are_parsed_from_text() -> None:
    assert money_figures("USD 9,500.00, $10,000 and CHF 15,000 but not 9,900") == [
        Decimal("9500.00"),
        Decimal("10000"),
        Decimal("15000"),
    ]
    assert dates_in("from 2024-02-30 to 2024-03-01") == [date(2024, 3, 1)]
    found = draft_candidates(["Sent from GB29 HRBT 5495 2403 1043 73 by Maria K. Lopez (case MRD-C000026)."])
    assert {"gb29hrbt54952403104373", "maria k lopez", "mrdc000026"} <= found
