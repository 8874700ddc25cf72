"""One case's facts, gathered from its notes: who, how much, when, where — and what is missing.

Why a separate step before drafting: the same facts feed the drafter, the code checks (which
compare a draft against them) and the question put to the analyst when a SAR-critical fact is
absent. Gathering is pure and deterministic, so a draft is reproducible from the same notes.

Notes repeat their case's subjects; subjects are merged by normalised name. A subject's account
is *ambiguous* when no note gives one: the account-like identifiers written in the notes' text
that no other subject holds are then the candidates the analyst picks from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from aml_mcp.aml.notes.model import CaseNote, normalise_identifier, normalise_name

_IBAN_GROUPED = re.compile(r"\b[A-Z]{2}\d{2}(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,3})?\b")
_IBAN_COMPACT = re.compile(r"\b[A-Z]{2}\d{2}[A-Z0-9]{11,30}\b")
_DIGIT_GROUPS = re.compile(r"\b\d{3,}(?:-\d{2,}){1,4}\b")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_ENTITY_SUFFIX = re.compile(
    r"\b(ltd|llc|inc|corp|plc|gmbh|ag|sa|s\.a\.|bv|nv|fze|limited|holdings|trust|foundation|company)\.?$",
    re.IGNORECASE,
)


def account_like(text: str) -> list[str]:
    """Account numbers written in free text (IBANs, grouped digits), in order of appearance."""
    found: list[tuple[int, str]] = []
    for pattern in (_IBAN_GROUPED, _IBAN_COMPACT, _DIGIT_GROUPS):
        for match in pattern.finditer(text):
            value = match.group(0)
            if not _ISO_DATE.fullmatch(value):
                found.append((match.start(), value))
    seen: dict[str, str] = {}
    for _, value in sorted(found):
        seen.setdefault(normalise_identifier(value), value)
    return list(seen.values())


def is_entity(name: str) -> bool:
    """Whether a subject looks like a company (a date of birth does not apply to it)."""
    return _ENTITY_SUFFIX.search(name.strip()) is not None


@dataclass(frozen=True, slots=True)
class SubjectFacts:
    key: str
    """Unique within the case and stable for the same notes: used in the analyst's question keys."""
    name: str
    role: str | None
    account_ids: tuple[str, ...]
    date_of_birth: date | None
    entity: bool


@dataclass(frozen=True, slots=True)
class CaseFile:
    case_id: str
    notes: tuple[CaseNote, ...]
    """Oldest first."""
    subjects: tuple[SubjectFacts, ...]
    unattributed_accounts: tuple[str, ...]
    """Account-like identifiers in the notes' text that no subject is recorded as holding."""

    @property
    def first_seen(self) -> datetime:
        return self.notes[0].created_at

    @property
    def last_seen(self) -> datetime:
        return self.notes[-1].created_at

    @property
    def window(self) -> tuple[date, date]:
        """The case window: the dates of its first and last notes."""
        return self.first_seen.date(), self.last_seen.date()

    @property
    def typologies(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(code for note in self.notes for code in note.typologies))

    @property
    def jurisdictions(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(j for note in self.notes for j in note.jurisdictions))

    @property
    def counterparties(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for note in self.notes for c in note.counterparties))

    def amounts(self) -> list[tuple[Decimal, str | None]]:
        """Every recorded (amount, currency) pair, in note order."""
        return [(n.amount, n.currency) for n in self.notes if n.amount is not None]

    def total(self) -> tuple[Decimal, str | None] | None:
        """The largest recorded amount (notes record the running aggregate under review), or None."""
        amounts = self.amounts()
        if not amounts:
            return None
        return max(amounts, key=lambda pair: pair[0])


def _subject_key(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", name.casefold()).strip("-") or "subject"
    key, n = base, 2
    while key in taken:
        key, n = f"{base}-{n}", n + 1
    taken.add(key)
    return key


def build_case_file(case_id: str, notes: Sequence[CaseNote]) -> CaseFile:
    """Merge a case's notes (any order, at least one) into its facts."""
    if not notes:
        raise ValueError("a case file needs at least one note")
    ordered = tuple(sorted(notes, key=lambda n: (n.created_at, n.note_id)))
    merged: dict[str, dict[str, object]] = {}
    for note in ordered:
        for subject in note.subjects:
            entry = merged.setdefault(
                normalise_name(subject.name),
                {"name": subject.name, "role": None, "accounts": {}, "dob": None},
            )
            if entry["role"] is None and subject.role:
                entry["role"] = subject.role
            if subject.account_id:
                accounts = entry["accounts"]
                assert isinstance(accounts, dict)
                accounts.setdefault(normalise_identifier(subject.account_id), subject.account_id)
            if entry["dob"] is None and subject.date_of_birth is not None:
                entry["dob"] = subject.date_of_birth
    taken: set[str] = set()
    subjects: list[SubjectFacts] = []
    held: set[str] = set()
    for entry in merged.values():
        name = str(entry["name"])
        accounts = entry["accounts"]
        assert isinstance(accounts, dict)
        held.update(accounts)
        dob = entry["dob"]
        subjects.append(
            SubjectFacts(
                key=_subject_key(name, taken),
                name=name,
                role=entry["role"] if isinstance(entry["role"], str) else None,
                account_ids=tuple(accounts.values()),
                date_of_birth=dob if isinstance(dob, date) else None,
                entity=is_entity(name),
            )
        )
    written: dict[str, str] = {}
    for note in ordered:
        for value in account_like(note.text):
            written.setdefault(normalise_identifier(value), value)
    unattributed = tuple(v for k, v in written.items() if k not in held)
    return CaseFile(case_id, ordered, tuple(subjects), unattributed)
