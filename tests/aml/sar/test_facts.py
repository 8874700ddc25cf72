"""The case file: notes merged and ordered, subjects merged, accounts nobody is named with found."""

from __future__ import annotations

from datetime import date

import pytest

from aml_mcp.aml.sar.facts import account_like, build_case_file, is_entity
from tests.aml.sar.sample_case import NOTES


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
