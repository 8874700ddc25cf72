"""Each hit names the subjects the query named, exactly as the per-hit definition would, with the
query's identifier candidates computed once by the search instead of once per hit."""

from __future__ import annotations

import random

from aml_mcp.aml.demo.corpus import DemoCorpus
from aml_mcp.aml.notes.model import normalise_identifier, normalise_name
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.engine import NoteSearch, SearchHit, SearchRequest
from aml_mcp.aml.search.identifiers import identifier_candidates


def named_by_definition(hit: SearchHit, query: str) -> list[str]:
    candidates = set(identifier_candidates(query))
    spoken = f" {normalise_name(query)} "
    return [
        s.name
        for s in hit.subjects
        if normalise_name(s.name) in candidates
        or f" {normalise_name(s.name)} " in spoken
        or (s.account_id is not None and normalise_identifier(s.account_id) in candidates)
    ]


def test_matched_subjects_follow_the_definition(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, searcher: NoteSearch
) -> None:
    rng = random.Random(5)
    tenant, notes = next(iter(demo_corpus.notes.items()))
    queries = ["cash deposits structuring", ("a b " * 250)[:1000]]
    for demo in rng.sample(notes, 40):
        for subject in demo.note.subjects:
            queries.append(f"account {subject.account_id}" if subject.account_id else subject.name)
            queries.append(f"{subject.name} and {demo.note.case_id}")
            queries.append(subject.name.upper().replace(" ", "  "))
    named = 0
    for query in queries:
        for hit in searcher.search(demo_store.tenant(tenant), SearchRequest(query=query, top_k=20)):
            assert hit.matched_subjects == named_by_definition(hit, query), query
            named += bool(hit.matched_subjects)
    assert named > 40  # the queries do name subjects
