"""No query, filter or argument returns another tenant's note (property-style over many queries)."""

from __future__ import annotations

import random

import pytest

from aml_mcp.aml.demo.corpus import TENANTS, DemoCorpus
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.engine import NoteSearch, SearchMode, SearchRequest


def _queries_against(victim: str, corpus: DemoCorpus, rng: random.Random) -> list[SearchRequest]:
    """Queries built from the victim bank's own identifiers and wording, plus generic ones."""
    notes = corpus.notes[victim]
    requests: list[SearchRequest] = []
    for demo in rng.sample(notes, 4):
        note = demo.note
        subject = note.subjects[0]
        texts = [note.note_id, note.case_id, subject.name, note.text[:80], *note.counterparties]
        if subject.account_id:
            texts.append(subject.account_id)
        for text in texts:
            requests.append(SearchRequest(query=text, top_k=50))
        requests.append(SearchRequest(query="structuring", case_id=note.case_id, top_k=50))
        requests.append(SearchRequest(query=subject.name, typology=note.typologies[0], top_k=50))
    labelled = [q for q in corpus.queries if q.tenant == victim]
    requests += [SearchRequest(query=q.text, top_k=50) for q in rng.sample(labelled, 6)]
    requests += [
        SearchRequest(query="*", top_k=50),
        SearchRequest(query='" OR 1=1 --', top_k=50),
        SearchRequest(query="NEAR(cash deposits) AND tenant:*", top_k=50),
        SearchRequest(query="cash", date_from="2000-01-01", date_to="2100-01-01", top_k=50),
    ]
    return requests


@pytest.mark.slow
def test_no_search_returns_another_tenants_note(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch
) -> None:
    rng = random.Random(7)
    owned = {t: {n.note.note_id for n in notes} for t, notes in demo_corpus.notes.items()}
    checked = 0
    for caller in TENANTS:
        view = demo_store.tenant(caller.name)
        for victim in TENANTS:
            if victim.name == caller.name:
                continue
            for request in _queries_against(victim.name, demo_corpus, rng):
                for mode in SearchMode:
                    hits = searcher.search(view, request, mode)
                    assert all(h.note_id in owned[caller.name] for h in hits), (caller.name, request)
                    assert all(h.note_id not in owned[victim.name] for h in hits)
                    checked += 1
    assert checked > 700, checked


def test_foreign_identifiers_never_boost(demo_store: SqliteNotes, demo_corpus: DemoCorpus) -> None:
    a, b = TENANTS[0].name, TENANTS[1].name
    from aml_mcp.aml.notes.model import NoteFilter
    from aml_mcp.aml.search.identifiers import identifier_candidates

    for demo in demo_corpus.notes[b][:40]:
        for subject in demo.note.subjects:
            query = f"{subject.name} {subject.account_id or ''} {demo.note.case_id}"
            found = demo_store.tenant(a).identifier_matches(identifier_candidates(query), NoteFilter())
            assert not found


def test_unknown_tenant_sees_nothing(demo_store: SqliteNotes, searcher: NoteSearch) -> None:
    view = demo_store.tenant("no-such-bank")
    assert searcher.search(view, SearchRequest(query="cash deposits")) == []
    assert view.case_notes(TENANTS[0].prefix + "-C000001") == []
    assert view.count() == 0
