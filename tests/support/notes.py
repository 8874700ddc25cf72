"""Reading a bank's notes back through the notes store protocol only (`TenantNoteAccess`).

The stores keep no lookup by note id and no walk over whole notes: nothing in the server needs
either, so the protocol does not carry them. Tests that check what was written read it back the
way the re-embedding does (`iter_texts`, row ids in row order) and fetch the notes with `get`.
"""

from __future__ import annotations

from aml_mcp.aml.notes.model import CaseNote
from aml_mcp.aml.notes.storage import TenantNoteAccess


def notes_in_row_order(view: TenantNoteAccess, batch: int = 2000) -> list[CaseNote]:
    """Every note of the bank, in row order, read `batch` rows at a time."""
    found: list[CaseNote] = []
    for rows in view.iter_texts(batch=batch):
        notes = view.get([rowid for rowid, _ in rows])
        found.extend(notes[rowid] for rowid, _ in rows)
    return found


def note_by_id(view: TenantNoteAccess, note_id: str) -> CaseNote | None:
    """The bank's note with this id, if it has one."""
    return next((note for note in notes_in_row_order(view) if note.note_id == note_id), None)
