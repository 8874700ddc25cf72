"""Search arguments, filters, bounds, exact-identifier ranking and result shape."""

from __future__ import annotations

from datetime import datetime

import pytest
from pydantic import ValidationError

from aml_mcp.aml.demo.corpus import TENANTS, DemoCorpus
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.engine import MAX_TOP_K, NoteSearch, SearchMode, SearchRequest
from aml_mcp.aml.search.lexical import lexical_match

BANK = TENANTS[0].name


@pytest.mark.parametrize("top_k", [0, -1, MAX_TOP_K + 1])
def test_top_k_out_of_bounds_is_refused(top_k: int) -> None:
    with pytest.raises(ValidationError):
        SearchRequest(query="cash", top_k=top_k)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"query": ""},
        {"query": "   "},
        {"query": "x" * 1001},
        {"query": "cash", "date_from": "last week"},
        {"query": "cash", "date_from": "2024-02-01", "date_to": "2024-01-01"},
        {"query": "cash", "tenant": "other-bank"},
    ],
)
def test_bad_arguments_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        SearchRequest.model_validate(kwargs)


@pytest.mark.parametrize("top_k", [1, 7, MAX_TOP_K])
def test_top_k_is_honoured(demo_store: SqliteNotes, searcher: NoteSearch, top_k: int) -> None:
    hits = searcher.search(demo_store.tenant(BANK), SearchRequest(query="cash deposits", top_k=top_k))
    assert len(hits) == top_k
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_filters(demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch) -> None:
    view = demo_store.tenant(BANK)
    notes = [d.note for d in demo_corpus.notes[BANK]]
    case_id = notes[5].case_id
    for mode in SearchMode:
        hits = searcher.search(view, SearchRequest(query="funds", case_id=case_id, top_k=50), mode)
        if mode is not SearchMode.LEXICAL:
            assert {h.note_id for h in hits} == {n.note_id for n in notes if n.case_id == case_id}
        assert all(h.case_id == case_id for h in hits)

        hits = searcher.search(view, SearchRequest(query="account", typology="Crypto-Mixing", top_k=50), mode)
        assert hits and all("crypto_mixing" in h.typologies for h in hits)

        request = SearchRequest(
            query="transfers abroad", date_from="2024-03-01", date_to="2024-06-30", top_k=50
        )
        hits = searcher.search(view, request, mode)
        assert hits
        for hit in hits:
            moment = datetime.fromisoformat(hit.created_at)
            assert "2024-03-01" <= moment.date().isoformat() <= "2024-06-30"


def test_filters_that_match_nothing(demo_store: SqliteNotes, searcher: NoteSearch) -> None:
    view = demo_store.tenant(BANK)
    assert searcher.search(view, SearchRequest(query="cash", case_id="NO-SUCH-CASE")) == []
    assert searcher.search(view, SearchRequest(query="cash", typology="not_a_typology")) == []
    assert searcher.search(view, SearchRequest(query="cash", date_to="1999-12-31")) == []
    # A typology that normalises to nothing filters both halves (it once filtered only the lexical one).
    for mode in SearchMode:
        assert searcher.search(view, SearchRequest(query="cash", typology="!!!"), mode) == [], mode


def test_exact_identifiers_win_top1(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch
) -> None:
    exact = [q for q in demo_corpus.queries if q.kind in {"account_id", "name", "case_id"}]
    assert len(exact) >= 30
    for query in exact:
        hits = searcher.search(demo_store.tenant(query.tenant), SearchRequest(query=query.text, top_k=3))
        assert hits and hits[0].note_id in query.relevance, query.text
        assert hits[0].matched_identifiers


def test_hit_shape_and_matched_subject_first(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch
) -> None:
    demo = next(d for d in demo_corpus.notes[BANK] if len(d.note.subjects) > 1)
    wanted = demo.note.subjects[1]
    assert wanted.account_id is not None
    hit = searcher.search(demo_store.tenant(BANK), SearchRequest(query=wanted.account_id, top_k=1))[0]
    assert hit.subjects[0] == wanted
    assert hit.matched_identifiers == ["account_id"]
    assert hit.snippet
    assert set(hit.model_dump()) >= {"note_id", "case_id", "score", "snippet", "subjects"}


@pytest.mark.parametrize("query", ['"', "*", "a AND", "NEAR(", "col:value", "^", "'); DROP TABLE notes; --"])
def test_fts_syntax_in_queries_is_inert(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch, query: str
) -> None:
    hits = searcher.search(demo_store.tenant(BANK), SearchRequest(query=query))  # answered, not raised
    assert {hit.note_id for hit in hits} <= {demo.note.note_id for demo in demo_corpus.notes[BANK]}


def test_lexical_match_quotes_every_term() -> None:
    assert lexical_match('the "cash" OR deposits*') == '"cash" OR "deposits"'
    assert lexical_match("the of and") is None
