"""Facts a SAR needs that a case's notes lack, as questions for the analyst and answers read back.

Two facts are asked for: an individual subject's date of birth, and the account a subject holds
when the notes never say (typically: two accounts named in the text, unconfirmed which is whose).
Each question is one elicitation form under a key unique per case, fact and subject
(`dob:<case>:<subject>`, `account:<case>:<subject>`), so answers for a batch of cases never
collide and a re-asked key finds its stored answer.

Answers are checked here, not trusted: a date must be a real past date, an account must be one
of the candidates offered (or, when the notes offer none, look like an account number). A
declined, cancelled or malformed answer leaves the fact missing, and the draft's checks say so.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from enum import StrEnum
from typing import Any

from aml_mcp.aml.sar.facts import CaseFile, SubjectFacts
from aml_mcp.catalog.invocation import InputRequest, elicit_form

_ACCOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.:/-]{2,63}$")
EARLIEST_BIRTH_YEAR = 1900


class FactKind(StrEnum):
    DATE_OF_BIRTH = "dob"
    ACCOUNT = "account"


@dataclass(frozen=True, slots=True)
class MissingFact:
    kind: FactKind
    case_id: str
    subject: SubjectFacts
    choices: tuple[str, ...] = ()
    """For an account: the candidates found in the notes (empty: free entry)."""

    @property
    def key(self) -> str:
        return f"{self.kind.value}:{self.case_id}:{self.subject.key}"

    def request(self) -> InputRequest:
        """The elicitation form that asks the analyst for this fact."""
        who = f"{self.subject.name} ({self.subject.role})" if self.subject.role else self.subject.name
        if self.kind is FactKind.DATE_OF_BIRTH:
            return elicit_form(
                f"Case {self.case_id}: the notes do not record the date of birth of {who}, "
                "which the SAR's subject information needs.",
                {
                    "type": "object",
                    "properties": {
                        "date_of_birth": {
                            "type": "string",
                            "format": "date",
                            "title": "Date of birth",
                            "description": "YYYY-MM-DD",
                        }
                    },
                    "required": ["date_of_birth"],
                },
            )
        field: dict[str, Any] = {"type": "string", "title": f"Account held by {self.subject.name}"}
        if self.choices:
            field["enum"] = list(self.choices)
            message = (
                f"Case {self.case_id}: the notes name {', '.join(self.choices)} without confirming "
                f"which account {who} holds."
            )
        else:
            field.update(minLength=3, maxLength=64)
            message = f"Case {self.case_id}: the notes record no account for {who}."
        return elicit_form(
            message, {"type": "object", "properties": {"account_id": field}, "required": ["account_id"]}
        )

    def read(self, answer: Any) -> str | None:
        """The answered value if the analyst accepted and it is valid, else None."""
        if not isinstance(answer, Mapping) or answer.get("action") != "accept":
            return None
        content = answer.get("content")
        if not isinstance(content, Mapping):
            return None
        if self.kind is FactKind.DATE_OF_BIRTH:
            return _past_date(content.get("date_of_birth"))
        value = content.get("account_id")
        if not isinstance(value, str):
            return None
        value = value.strip()
        if self.choices:
            return value if value in self.choices else None
        return value if _ACCOUNT.fullmatch(value) else None


def _past_date(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    try:
        day = date.fromisoformat(value.strip())
    except ValueError:
        return None
    if day.year < EARLIEST_BIRTH_YEAR or day > datetime.now(UTC).date():
        return None
    return day.isoformat()


def missing_facts(case: CaseFile) -> list[MissingFact]:
    """What the analyst must supply before this case's SAR is complete, in subject order."""
    missing: list[MissingFact] = []
    for subject in case.subjects:
        if not subject.account_ids:
            missing.append(MissingFact(FactKind.ACCOUNT, case.case_id, subject, case.unattributed_accounts))
        if subject.date_of_birth is None and not subject.entity:
            missing.append(MissingFact(FactKind.DATE_OF_BIRTH, case.case_id, subject))
    return missing


AnalystFacts = Mapping[str, str]
"""Accepted answers by question key (`MissingFact.key`) -> value (ISO date or account id)."""


def read_answers(facts: list[MissingFact], answers: Mapping[str, Any]) -> dict[str, str]:
    """The valid answers among `answers` for `facts`, keyed like the questions."""
    out: dict[str, str] = {}
    for fact in facts:
        value = fact.read(answers.get(fact.key))
        if value is not None:
            out[fact.key] = value
    return out
