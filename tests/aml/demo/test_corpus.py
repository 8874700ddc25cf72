"""The demo corpus is deterministic, broad enough, and carries the gaps the SAR drafter must ask about."""

from __future__ import annotations

from aml_mcp.aml.demo.corpus import TENANTS, DemoCorpus, generate_notes, load_demo
from aml_mcp.aml.demo.typologies import TYPOLOGIES
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder


def test_generation_is_deterministic_and_sized() -> None:
    first = generate_notes(TENANTS[1], 120, seed=5)
    again = generate_notes(TENANTS[1], 120, seed=5)
    other = generate_notes(TENANTS[1], 120, seed=6)
    assert len(first) == 120
    assert [d.note for d in first] == [d.note for d in again]
    assert [d.note.text for d in first] != [d.note.text for d in other]


def test_corpus_breadth(demo_corpus: DemoCorpus) -> None:
    assert len(TYPOLOGIES) >= 12
    assert len(demo_corpus.notes) >= 3
    for notes in demo_corpus.notes.values():
        assert len({d.typology for d in notes}) >= 12
        assert len({j for d in notes for j in d.note.jurisdictions}) >= 8
        note_ids = [d.note.note_id for d in notes]
        assert len(note_ids) == len(set(note_ids))
    all_ids = [d.note.note_id for notes in demo_corpus.notes.values() for d in notes]
    assert len(all_ids) == len(set(all_ids)), "note ids are unique across banks"


def test_some_cases_lack_facts_a_sar_needs(demo_corpus: DemoCorpus) -> None:
    notes = [d.note for ns in demo_corpus.notes.values() for d in ns]
    assert any(s.date_of_birth is None for n in notes for s in n.subjects)
    assert any(s.account_id is None for n in notes for s in n.subjects)


def test_labelled_queries(demo_corpus: DemoCorpus) -> None:
    kinds = {q.kind for q in demo_corpus.queries}
    assert kinds == {"paraphrase", "keyword", "account_id", "name", "case_id"}
    assert {q.split for q in demo_corpus.queries} == {"tune", "test"}
    for query in demo_corpus.queries:
        owned = {d.note.note_id for d in demo_corpus.notes[query.tenant]}
        assert query.relevance and set(query.relevance) <= owned
        assert set(query.relevance.values()) <= {1, 2}


def test_load_demo_only_fills_empty_tenants(store: SqliteNotes, embedder: StaticEmbedder) -> None:
    first = load_demo(store, embedder, notes_per_tenant=30)
    assert first == {t.name: 30 for t in TENANTS}
    assert load_demo(store, embedder, notes_per_tenant=30) == {t.name: 0 for t in TENANTS}
    assert sorted(store.tenants()) == sorted(t.name for t in TENANTS)
