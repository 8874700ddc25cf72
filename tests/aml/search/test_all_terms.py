"""The all-terms lift: a query typed in the bank's own words puts the notes holding every word first."""

from __future__ import annotations

from datetime import UTC, datetime

from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.model import CaseNote
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import Candidates, NoteSearch, SearchMode, SearchRequest
from aml_mcp.aml.search.lexical import all_terms_expression, lexical_terms

BANK = "harbor-national"
TEXTS = {
    "N-1": "Teller flagged repeated cash deposits just under the reporting threshold.",
    "N-2": "Quarterly reconciliation of the teller drawer showed a cash shortfall.",
    "N-3": "Customer wired funds to an offshore company after a cash deposit.",
    "N-4": "Reconciliation of wire logs; no quarterly exceptions found.",
}


def _store(store: SqliteNotes, embedder: StaticEmbedder) -> SqliteNotes:
    notes = [
        CaseNote(note_id=nid, case_id="C-1", created_at=datetime(2024, 1, i + 1, tzinfo=UTC), text=text)
        for i, (nid, text) in enumerate(TEXTS.items())
    ]
    write_notes(store, BANK, notes, embedder)
    return store


def test_expression_only_when_every_word_is_the_banks(store: SqliteNotes, embedder: StaticEmbedder) -> None:
    view = _store(store, embedder).tenant(BANK)
    expression = all_terms_expression(view, lexical_terms("teller reconciliation"))
    assert expression == '"teller" AND "reconciliation"'
    # One word is not a phrase of the bank's own words; an unknown word means a paraphrase.
    assert all_terms_expression(view, lexical_terms("reconciliation")) is None
    assert all_terms_expression(view, lexical_terms("teller reconcilliation")) is None
    assert all_terms_expression(view, []) is None


def test_candidates_name_the_notes_holding_every_word(store: SqliteNotes, embedder: StaticEmbedder) -> None:
    view = _store(store, embedder).tenant(BANK)
    search = NoteSearch(embedder)
    found = search.candidates(view, SearchRequest(query="quarterly reconciliation teller"), SearchMode.HYBRID)
    names = {r: n.note_id for r, n in view.get(sorted(found.all_terms)).items()}
    assert sorted(names.values()) == ["N-2"]
    # Stemmed as the index is: "deposits" and "deposit" are one word.
    found = search.candidates(view, SearchRequest(query="cash deposit"), SearchMode.HYBRID)
    assert sorted(n.note_id for n in view.get(sorted(found.all_terms)).values()) == ["N-1", "N-3"]
    # Filters apply to it as to every other list.
    request = SearchRequest(query="cash deposit", date_to="2024-01-01")
    found = search.candidates(view, request, SearchMode.HYBRID)
    assert sorted(n.note_id for n in view.get(sorted(found.all_terms)).values()) == ["N-1"]
    # Other modes do not compute it.
    found = search.candidates(view, SearchRequest(query="cash deposit"), SearchMode.LEXICAL)
    assert found.all_terms == frozenset()


def test_the_lift_beats_fusion_but_not_an_identifier(embedder: StaticEmbedder) -> None:
    # Dense and lexical both prefer 1; note 2 holds every word; note 3 carries an exact identifier.
    found = Candidates(
        lexical={1: 9.0, 2: 3.0, 3: 1.0},
        dense={1: 0.9, 3: 0.5, 2: 0.1},
        exact={3: ["account:acc1"]},
        all_terms=frozenset({2}),
    )
    order = [rowid for rowid, _ in NoteSearch(embedder).order(found, 3)]
    assert order == [3, 2, 1]
    without = Candidates(found.lexical, found.dense, {}, frozenset())
    assert NoteSearch(embedder).order(without, 3)[0][0] == 1


def test_search_puts_the_all_words_note_first(store: SqliteNotes, embedder: StaticEmbedder) -> None:
    view = _store(store, embedder).tenant(BANK)
    hits = NoteSearch(embedder).search(view, SearchRequest(query="wire reconciliation quarterly"))
    assert hits[0].note_id == "N-4"
    assert hits[0].score > 1.0 > hits[1].score
