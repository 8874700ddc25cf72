"""One small case (three notes, an individual and a firm) for tests of the SAR parts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from aml_mcp.aml.notes.model import CaseNote, Subject

START = datetime(2024, 3, 1, 9, tzinfo=UTC)


def note(k: int, text: str, subjects: tuple[Subject, ...], **extra: Any) -> CaseNote:
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
    note(2, "Deposits of USD 9,500.00 were made at three branches to avoid the $10,000 report.", (ANA, FIRM)),
    note(
        1,
        "Activity involves accounts 1111-222-33333 and 0042-318-77651; unconfirmed which is Ana's.",
        (ANA, FIRM),
    ),
    note(3, "Funds were wired to Panama the next day. Recommend filing a SAR.", (ANA, FIRM)),
)
