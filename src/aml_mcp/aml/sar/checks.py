"""Code checks on a SAR draft: what must hold before a human reviews it, decided without a model.

Each check compares the draft with the case file it was drafted from (never with the drafter's
own account of itself), so any `Drafter` is judged the same way:

- `required_fields`: subjects with names, accounts and (for individuals) dates of birth; the
  activity dates, amount and currency; at least one typology; every narrative section written.
- `amounts_consistent`: the total and every transaction amount match the notes' recorded amounts;
  every money figure in the narrative is one the notes record or write.
- `dates_consistent`: the activity dates are the first and last note dates; every transaction's
  date is its note's date.
- `dates_in_case_window`: every date in the activity narrative lies inside the case window.
- `typology_codes_valid`: every typology is a known code (built-in catalogue plus a bank's own).
- `narrative_5w1h`: who, what, when, where, why and how are each answered, and concretely (who
  names a subject, when holds a date, where a jurisdiction or account, what an amount or typology).
- `no_foreign_identifiers`: no identifier of another tenant's notes appears (see `foreign_ids`);
  the detail gives a count only, never the value.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date
from decimal import Decimal, InvalidOperation

from pydantic import BaseModel, ConfigDict

from aml_mcp.aml.notes.model import normalise_identifier
from aml_mcp.aml.sar.draft import MISSING, SarDraft
from aml_mcp.aml.sar.facts import CaseFile
from aml_mcp.aml.sar.foreign_ids import draft_candidates

CHECKS: tuple[str, ...] = (
    "required_fields",
    "amounts_consistent",
    "dates_consistent",
    "dates_in_case_window",
    "typology_codes_valid",
    "narrative_5w1h",
    "no_foreign_identifiers",
)

_MONEY = re.compile(r"(?:\b[A-Z]{3}\s?|[$£€])(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?\b")
_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MISSING_MARK = MISSING.split("{", 1)[0]
_MIN_SECTION_WORDS = 4


class CheckResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    passed: bool
    detail: str


def money_figures(text: str) -> list[Decimal]:
    """Amounts written with a currency (`USD 9,500.00`, `$10,000`, `CHF 15,000`)."""
    out: list[Decimal] = []
    for match in _MONEY.finditer(text):
        try:
            out.append(Decimal(match.group(1).replace(",", "") + "." + (match.group(2) or "0")))
        except InvalidOperation:
            continue
    return out


def dates_in(text: str) -> list[date]:
    out: list[date] = []
    for match in _DATE.finditer(text):
        try:
            out.append(date(int(match.group(1)), int(match.group(2)), int(match.group(3))))
        except ValueError:
            continue
    return out


def foreign_candidates(draft: SarDraft) -> set[str]:
    """What `no_foreign_identifiers` looks up for this draft.

    Accounts the analyst typed in are left out: the analyst is the source of that value, and
    looking it up would tell them whether another bank holds it — a yes/no oracle on other
    institutions' customers.
    """
    names = [s.name for s in draft.subjects] + [a for s in draft.subjects for a in s.account_ids]
    texts = [draft.text(), *(c for t in draft.transactions for c in t.counterparties)]
    typed = {
        normalise_identifier(account)
        for subject in draft.subjects
        if subject.account_source == "analyst"
        for account in subject.account_ids
    }
    return draft_candidates(texts, names) - typed


@dataclass(frozen=True, slots=True)
class CheckSuite:
    """The checks, configured with the typology codes this deployment accepts."""

    typology_codes: frozenset[str]

    def run(self, draft: SarDraft, case: CaseFile, foreign: Collection[str]) -> list[CheckResult]:
        """Every check, in `CHECKS` order; `foreign` = this draft's candidates found in other tenants."""
        return [
            _required_fields(draft),
            _amounts_consistent(draft, case),
            _dates_consistent(draft, case),
            _dates_in_window(draft, case),
            self._typologies(draft),
            _narrative_5w1h(draft, case),
            _no_foreign(foreign),
        ]

    def _typologies(self, draft: SarDraft) -> CheckResult:
        unknown = [c for c in draft.typologies if c not in self.typology_codes]
        if not draft.typologies:
            return CheckResult(name="typology_codes_valid", passed=False, detail="no typology code")
        if unknown:
            return CheckResult(
                name="typology_codes_valid", passed=False, detail=f"unknown code(s): {', '.join(unknown)}"
            )
        return CheckResult(name="typology_codes_valid", passed=True, detail=", ".join(draft.typologies))


def _result(name: str, problems: Sequence[str], ok: str = "ok") -> CheckResult:
    return CheckResult(name=name, passed=not problems, detail="; ".join(problems) if problems else ok)


def _required_fields(draft: SarDraft) -> CheckResult:
    problems: list[str] = []
    if not draft.subjects:
        problems.append("no subject")
    for s in draft.subjects:
        if not s.account_ids:
            problems.append(f"account of {s.name}")
        if not s.entity and not s.date_of_birth:
            problems.append(f"date of birth of {s.name}")
    if not draft.activity_start or not draft.activity_end:
        problems.append("activity dates")
    if draft.total_amount is None:
        problems.append("amount")
    elif not draft.currency:
        problems.append("currency")
    if not draft.typologies:
        problems.append("typology")
    n = draft.narrative
    sections = {
        "subject information": n.subject_information,
        "transaction details": n.transaction_details,
        "typology": n.typology,
        "law-enforcement contact": n.law_enforcement_contact,
        "filing institution": n.filing_institution,
        **n.suspicious_activity.model_dump(),
    }
    problems += [f"{name} section" for name, text in sections.items() if not str(text).strip()]
    return _result("required_fields", [f"missing {p}" for p in problems])


def _amounts_consistent(draft: SarDraft, case: CaseFile) -> CheckResult:
    recorded = {(a, c) for a, c in case.amounts()}
    written = {figure for note in case.notes for figure in money_figures(note.text)}
    known = {a for a, _ in recorded} | written
    problems: list[str] = []
    if draft.total_amount is not None:
        total = Decimal(draft.total_amount)
        if (total, draft.currency) not in recorded:
            problems.append(f"total {draft.total_amount} {draft.currency or ''} is not a recorded amount")
        else:
            largest = case.total()
            if largest is not None and total != largest[0]:
                problems.append("total is not the largest recorded aggregate")
    elif recorded:
        problems.append("the notes record an amount the draft omits")
    notes = {n.note_id: n for n in case.notes}
    for t in draft.transactions:
        note = notes.get(t.note_id)
        if note is None:
            problems.append(f"transaction cites unknown note {t.note_id}")
        elif (None if t.amount is None else Decimal(t.amount)) != note.amount or (
            t.amount is not None and t.currency != note.currency
        ):
            problems.append(f"transaction {t.note_id} amount differs from its note")
    n = draft.narrative
    narrative = "\n".join([n.transaction_details, *n.suspicious_activity.model_dump().values()])
    stray = sorted({f"{v:,.2f}" for v in money_figures(narrative) if v not in known})
    if stray:
        problems.append(f"narrative amount(s) not in the notes: {', '.join(stray[:5])}")
    return _result("amounts_consistent", problems)


def _dates_consistent(draft: SarDraft, case: CaseFile) -> CheckResult:
    start, end = (d.isoformat() for d in case.window)
    problems: list[str] = []
    if draft.activity_start != start:
        problems.append(f"activity start {draft.activity_start} is not the first note's date {start}")
    if draft.activity_end != end:
        problems.append(f"activity end {draft.activity_end} is not the last note's date {end}")
    dates = {n.note_id: n.created_at.date().isoformat() for n in case.notes}
    problems += [
        f"transaction {t.note_id} dated {t.date}, its note {dates.get(t.note_id)}"
        for t in draft.transactions
        if dates.get(t.note_id) != t.date
    ]
    return _result("dates_consistent", problems)


def _dates_in_window(draft: SarDraft, case: CaseFile) -> CheckResult:
    first, last = case.window
    n = draft.narrative
    activity = "\n".join([n.transaction_details, *n.suspicious_activity.model_dump().values()])
    found = dates_in(activity) + dates_in(draft.activity_start) + dates_in(draft.activity_end)
    outside = sorted({d.isoformat() for d in found if not first <= d <= last})
    return _result(
        "dates_in_case_window",
        [f"outside {first.isoformat()}..{last.isoformat()}: {', '.join(outside[:5])}"] if outside else [],
        ok=f"{len(found)} date(s) within {first.isoformat()}..{last.isoformat()}",
    )


def _narrative_5w1h(draft: SarDraft, case: CaseFile) -> CheckResult:
    s = draft.narrative.suspicious_activity
    problems: list[str] = []
    for name, text in s.model_dump().items():
        if _MISSING_MARK in text or len(text.split()) < _MIN_SECTION_WORDS:
            problems.append(f"{name} not answered")
    if not any(subject.name in s.who for subject in draft.subjects):
        problems.append("who names no subject")
    if not dates_in(s.when):
        problems.append("when gives no date")
    places = list(case.jurisdictions) + [a for subject in draft.subjects for a in subject.account_ids]
    if not any(p in s.where for p in places):
        problems.append("where names no jurisdiction or account")
    if not money_figures(s.what) and not any(c in s.what for c in draft.typologies):
        problems.append("what gives no amount or typology")
    return _result("narrative_5w1h", sorted(set(problems), key=problems.index))


def _no_foreign(foreign: Collection[str]) -> CheckResult:
    if foreign:
        return CheckResult(
            name="no_foreign_identifiers",
            passed=False,
            detail=f"{len(foreign)} identifier(s) in the draft belong to another institution's records",
        )
    return CheckResult(name="no_foreign_identifiers", passed=True, detail="ok")
