"""The pieces under the AML tools, without HTTP: case facts, analyst answers, checks, wiring, settings."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import ValidationError

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.note_store import NoteStore
from aml_mcp.aml.notes import CaseNote, Subject, normalise_identifier
from aml_mcp.aml.sar.checks import CHECKS, CheckSuite, dates_in, foreign_candidates, money_figures
from aml_mcp.aml.sar.draft import TYPOLOGY_LABELS, SarDraft, TemplateDrafter
from aml_mcp.aml.sar.facts import account_like, build_case_file, is_entity
from aml_mcp.aml.sar.foreign_ids import draft_candidates
from aml_mcp.aml.sar.questions import FactKind, MissingFact, missing_facts, read_answers
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.wiring import load_drafter
from aml_mcp.config import Settings

SUITE = CheckSuite(frozenset(TYPOLOGY_LABELS))
START = datetime(2024, 3, 1, 9, tzinfo=UTC)


def _note(k: int, text: str, subjects: tuple[Subject, ...], **extra: Any) -> CaseNote:
    return CaseNote(
        note_id=f"T-N1-{k}",
        case_id="T-C1",
        created_at=START + timedelta(days=3 * k),
        text=text,
        subjects=subjects,
        typologies=("structuring",),
        amount=Decimal("48000"),
        currency="USD",
        jurisdictions=("United States", "Panama"),
        counterparties=("Granite Holdings Ltd",),
        **extra,
    )


ANA = Subject(name="Ana P. Reyes", account_id=None, role="primary", date_of_birth=None)
FIRM = Subject(name="Granite Holdings Ltd", account_id="0042-318-77651", role="beneficiary")
NOTES = (
    _note(
        2, "Deposits of USD 9,500.00 were made at three branches to avoid the $10,000 report.", (ANA, FIRM)
    ),
    _note(
        1,
        "Activity involves accounts 1111-222-33333 and 0042-318-77651; unconfirmed which is Ana's.",
        (ANA, FIRM),
    ),
    _note(3, "Funds were wired to Panama the next day. Recommend filing a SAR.", (ANA, FIRM)),
)


def test_case_file_merges_subjects_orders_notes_and_finds_unattributed_accounts() -> None:
    case = build_case_file("T-C1", NOTES)
    assert [n.note_id for n in case.notes] == ["T-N1-1", "T-N1-2", "T-N1-3"]
    assert [s.key for s in case.subjects] == ["ana-p-reyes", "granite-holdings-ltd"]
    assert case.subjects[1].entity and not case.subjects[0].entity
    assert case.unattributed_accounts == ("1111-222-33333",)  # the firm's own account is attributed
    assert case.window == (date(2024, 3, 4), date(2024, 3, 10))
    with pytest.raises(ValueError, match="at least one note"):
        build_case_file("T-C1", [])


def test_account_like_finds_ibans_and_grouped_digits_but_not_dates() -> None:
    text = (
        "Paid from GB29 HRBT 5495 2403 1043 73 and 7213-858-76724 on 2024-01-05; also CH9300762011623852957."
    )
    assert account_like(text) == ["GB29 HRBT 5495 2403 1043 73", "7213-858-76724", "CH9300762011623852957"]
    assert is_entity("Atlas Trading S.A.") and is_entity("Bluewater LLC") and not is_entity("Maria K. Lopez")


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


def test_the_drafter_is_pluggable_and_a_bad_one_is_refused() -> None:
    assert isinstance(load_drafter(None), TemplateDrafter)
    assert load_drafter("tests.aml_tools.slow_drafter:SlowDrafter").name == "slow"
    with pytest.raises(ValueError, match="not a callable"):
        load_drafter("tests.aml_tools.slow_drafter:DELAY_S")
    with pytest.raises(ValueError, match="did not return a Drafter"):
        load_drafter("builtins:object")
    with pytest.raises(ValidationError):
        AmlSettings(drafter="not a path")


def test_settings_bounds_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AmlSettings(extra_typology_codes=["Pig Butchering"]).extra_typology_codes == ["pig_butchering"]
    for bad in ({"demo_notes_per_tenant": 100_001}, {"search_default_top_k": 0}, {"eval_slice_ms": 5}):
        with pytest.raises(ValidationError):
            AmlSettings(**bad)
    monkeypatch.setenv("AML_MCP_AML__DEMO_NOTES_PER_TENANT", "500")
    monkeypatch.setenv("AML_MCP_AML__EXTRA_TYPOLOGY_CODES", '["romance_fraud"]')
    settings = Settings()
    assert settings.aml.demo_notes_per_tenant == 500 and settings.aml.extra_typology_codes == [
        "romance_fraud"
    ]


class _ZeroEmbedder:
    dims = 8
    name = "zero:8"

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.zeros((len(texts), self.dims), dtype=np.float32)


def test_the_demo_is_loaded_only_into_an_empty_store(tmp_path: Path) -> None:
    small = AmlSettings(demo_notes_per_tenant=12)
    assert load_demo_if_empty(AmlSettings(demo_notes_per_tenant=0), tmp_path) == {}
    announced: list[str] = []
    assert load_demo_if_empty(small, tmp_path, announced.append) == {
        "meridian-bank": 12,
        "harbour-trust": 12,
        "alpen-privatbank": 12,
    }
    assert announced and "12 notes per bank" in announced[0]
    assert load_demo_if_empty(small, tmp_path, announced.append) == {}
    assert len(announced) == 1
    own = tmp_path / "own"
    with NoteStore.open(own) as store:
        write_notes(store, "acme-bank", list(NOTES), _ZeroEmbedder())
    assert load_demo_if_empty(small, own) == {}
    with NoteStore.open(own) as store:
        assert store.tenants() == ["acme-bank"]
