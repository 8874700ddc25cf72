"""A dataset's fingerprint: equal exactly when two sets of notes hold the same notes.

Why: an evaluation baseline is only comparable with runs over the same data, and the demo's
labelled queries only grade a tenant whose notes *are* the demo's. Order-independent (the store's
row order changes with re-ingestion), and sensitive to every field of every note.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from aml_mcp.aml.notes.model import CaseNote


def note_digest(note: CaseNote) -> bytes:
    return hashlib.sha256(note.model_dump_json().encode()).digest()


def combine(digests: Iterable[bytes]) -> str:
    """Hex fingerprint of a multiset of note digests."""
    total = hashlib.sha256()
    for digest in sorted(digests):
        total.update(digest)
    return total.hexdigest()


def fingerprint(notes: Iterable[CaseNote]) -> str:
    return combine(note_digest(n) for n in notes)
