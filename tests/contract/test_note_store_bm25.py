"""Both notes stores rank the lexical half by the same BM25: FTS5's `bm25()` on SQLite, and on
PostgreSQL the same formula over the statistics its writes keep (`aml/notes/bm25.py`), scoring only
a candidate plan's notes. A bank's demo notes go into both; for queries of common, rare and mixed
words, the best notes and their scores agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.notes.model import CaseNote, LexicalHit, NoteFilter
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema

BANK = TENANTS[0]
NOTES = 600
TOP = 5
QUERIES = [
    '"cash"',
    '"cash" OR "deposits"',
    '"wire" OR "transfer" OR "shell"',
    '"structuring" OR "threshold" OR "teller"',
    '"invoice" OR "textile"',
]


@pytest.fixture(scope="module")
def stores(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[NotesBackend, NotesBackend, list[CaseNote]]]:
    notes = [d.note for d in generate_notes(BANK, NOTES)]
    vectors = np.ones((len(notes), 4), dtype=np.float32) / 2
    local = SqliteNotes.open(Path(tmp_path_factory.mktemp("bm25")))
    with scratch_schema() as (url, schema):
        shared = PostgresNotes(PostgresDatabase(url, schema=schema)).open()
        try:
            for store in (local, shared):
                store.tenant(BANK.name).replace_notes(notes, vectors, space="test")
            yield local, shared, notes
        finally:
            shared.close()
            local.close()


def _ranked(store: NotesBackend, query: str) -> list[tuple[str, float]]:
    view = store.tenant(BANK.name)
    hits: list[LexicalHit] = view.lexical(query, NoteFilter(), TOP)
    found = view.get([hit.rowid for hit in hits])
    return [(found[hit.rowid].note_id, hit.bm25) for hit in hits]


@pytest.mark.parametrize("query", QUERIES)
def test_the_best_notes_and_their_scores_agree(
    stores: tuple[NotesBackend, NotesBackend, list[CaseNote]], query: str
) -> None:
    local, shared, _ = stores
    on_sqlite, on_postgres = _ranked(local, query), _ranked(shared, query)
    assert on_sqlite, f"{query} matches no note: the comparison would prove nothing"
    assert [score for _, score in on_postgres] == pytest.approx([score for _, score in on_sqlite], rel=1e-3)
    # Notes with equal scores may come in either order, and the worst score's may be cut by TOP:
    # every better score's notes are the same on both.
    worst = max(score for _, score in on_sqlite)
    assert _by_score(on_postgres, below=worst) == _by_score(on_sqlite, below=worst)


def _by_score(ranked: list[tuple[str, float]], *, below: float) -> set[str]:
    return {note_id for note_id, score in ranked if score < below - 1e-3 * abs(below)}


def test_a_word_no_note_holds_adds_nothing(stores: tuple[NotesBackend, NotesBackend, list[CaseNote]]) -> None:
    local, shared, _ = stores
    for store in (local, shared):
        assert _ranked(store, '"cash" OR "zzqxnonword"') == _ranked(store, '"cash"')
