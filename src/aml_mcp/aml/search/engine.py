"""Hybrid search over one tenant's case notes: BM25 + dense cosine, fused, with exact-id boosts.

The flow for one query:

1. lexical candidates: FTS5 BM25 over the tenant's own index (filters applied in SQL);
2. dense candidates: cosine of the query vector against the tenant's stored note vectors
   (filters applied as a mask), computed with one matrix-vector product;
3. fusion with the tuned weights of `fusion.TUNED_WEIGHTS`;
4. exact identifiers in the query (account ids, case/note ids, names) looked up in the tenant's
   identifier index; notes that carry one are lifted above every non-matching note.

A search needs a `TenantNotes`, which only `NoteStore.tenant(<verified tenant>)` makes: there is
no argument through which a caller could name another tenant.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aml_mcp.aml.note_store import (
    NoteFilter,
    TenantNotes,
    VectorSpaceMismatchError,
    normalise_identifier,
    normalise_name,
    parse_iso_bound,
)
from aml_mcp.aml.notes import CaseNote, Subject, normalise_typology
from aml_mcp.aml.search.dense import nearest
from aml_mcp.aml.search.embeddings import Embedder
from aml_mcp.aml.search.fusion import TUNED_WEIGHTS, FusionWeights, fuse
from aml_mcp.aml.search.identifiers import identifier_candidates
from aml_mcp.aml.search.snippets import Highlighter

_log = logging.getLogger(__name__)

MAX_TOP_K = 50
CANDIDATES = 100
"""Depth of each candidate list before fusion: deep enough that fusion can reorder, cheap at 100k."""
IDENTIFIER_BOOST = 10.0
"""Added per distinct exact identifier matched; fused scores are below ~1, so matches always lead."""
SNIPPET_TOKENS = 24
HIGHLIGHT = ("**", "**")
"""Markdown bold: the assistants that read results render or understand it."""

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
        "any",
        "all",
        "about",
        "show",
        "find",
        "notes",
        "note",
        "case",
        "cases",
        "related",
        "involving",
        "regarding",
    ]
)
_MAX_LEXICAL_TERMS = 32


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    DENSE = "dense"


def _check_bound(value: str | None) -> str | None:
    if value is None:
        return None
    try:
        parse_iso_bound(value, end=False)
    except ValueError:
        raise ValueError("must be an ISO 8601 date (YYYY-MM-DD) or date-time") from None
    return value


class SearchRequest(BaseModel):
    """The arguments of `search_aml_notes` (the tenant is never one of them)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    query: str = Field(min_length=1, max_length=1000, description="What to look for, in any words.")
    top_k: int = Field(default=10, ge=1, le=MAX_TOP_K, description="How many notes to return (1-50).")
    date_from: Annotated[str | None, Field(description="Earliest note date, ISO 8601, inclusive.")] = None
    date_to: Annotated[str | None, Field(description="Latest note date, ISO 8601, inclusive.")] = None
    typology: str | None = Field(default=None, max_length=100, description="Only notes with this typology.")
    case_id: str | None = Field(default=None, max_length=128, description="Only notes of this case.")

    _bounds = field_validator("date_from", "date_to")(_check_bound)

    @model_validator(mode="after")
    def _ordered(self) -> SearchRequest:
        if (
            self.date_from is not None
            and self.date_to is not None
            and parse_iso_bound(self.date_from, end=False) > parse_iso_bound(self.date_to, end=True)
        ):
            raise ValueError("date_from is after date_to")
        return self

    def note_filter(self) -> NoteFilter:
        return NoteFilter(
            date_from_ts=None if self.date_from is None else parse_iso_bound(self.date_from, end=False),
            date_to_ts=None if self.date_to is None else parse_iso_bound(self.date_to, end=True),
            typology=None if not self.typology else normalise_typology(self.typology),
            case_id=self.case_id or None,
        )


class SearchHit(BaseModel):
    """One result, as the tool returns it."""

    note_id: str
    case_id: str
    created_at: str
    score: float
    snippet: str
    subjects: list[Subject] = Field(description="The note's subjects, those matching the query first.")
    matched_identifiers: list[str] = Field(
        default_factory=list, description="Exact identifiers from the query found on this note."
    )
    typologies: list[str] = Field(default_factory=list)


def lexical_terms(query: str) -> list[str]:
    """The query's content words, lower-cased, deduplicated, bounded in number.

    Words are runs of letters and digits only, so no FTS5 syntax (quotes, `*`, `:`, `NEAR`,
    parentheses) can get through; the store quotes each one.
    """
    words = [w for w in (m.group(0).lower() for m in _WORD.finditer(query)) if w not in _STOPWORDS]
    return list(dict.fromkeys(words))[:_MAX_LEXICAL_TERMS]


def lexical_match(query: str) -> str | None:
    """An FTS5 expression OR-ing all the query's content words, each quoted."""
    words = lexical_terms(query)
    return " OR ".join(f'"{w}"' for w in words) if words else None


@dataclass(frozen=True, slots=True)
class Candidates:
    """Everything ranking needs for one query, gathered once (the benchmark re-fuses these)."""

    lexical: dict[int, float]
    """BM25 per row id, larger is better."""
    dense: dict[int, float]
    """Cosine per row id."""
    exact: dict[int, list[str]]
    """Row id -> `kind:value` identifiers from the query found on that note."""


@dataclass(frozen=True, slots=True)
class _Ranked:
    rowid: int
    score: float
    matched: tuple[str, ...]


class NoteSearch:
    """Hybrid search; holds only its dependencies (the embedder and the fusion weights)."""

    def __init__(self, embedder: Embedder, weights: FusionWeights = TUNED_WEIGHTS) -> None:
        self._embedder = embedder
        self._weights = weights

    def search(
        self, notes: TenantNotes, request: SearchRequest, mode: SearchMode = SearchMode.HYBRID
    ) -> list[SearchHit]:
        """The best `request.top_k` notes of the tenant behind `notes` for `request`."""
        return self._render(notes, self._rank(notes, request, mode), request.query)

    def rank_ids(
        self, notes: TenantNotes, request: SearchRequest, mode: SearchMode = SearchMode.HYBRID
    ) -> list[str]:
        """Note ids only, in rank order (for evaluation, where snippets are waste)."""
        ranked = self._rank(notes, request, mode)
        found = notes.get([r.rowid for r in ranked])
        return [found[r.rowid].note_id for r in ranked if r.rowid in found]

    # -- ranking ----------------------------------------------------------------------------

    def candidates(self, notes: TenantNotes, request: SearchRequest, mode: SearchMode) -> Candidates:
        """Lexical, dense and exact-identifier candidates of `request` within `notes`."""
        where = request.note_filter()
        match = notes.match_expression(lexical_terms(request.query)) if mode is not SearchMode.DENSE else None
        lexical: dict[int, float] = {}
        dense: dict[int, float] = {}
        exact: dict[int, list[str]] = {}
        if mode is not SearchMode.DENSE and match is not None:
            lexical = {h.rowid: -h.bm25 for h in notes.lexical(match, where, CANDIDATES)}
        if mode is not SearchMode.LEXICAL:
            dense = self._dense(notes, request.query, where)
        if mode is SearchMode.HYBRID:
            exact = notes.identifier_matches(identifier_candidates(request.query), where)
        return Candidates(lexical, dense, exact)

    def order(
        self, found: Candidates, top_k: int, mode: SearchMode = SearchMode.HYBRID
    ) -> list[tuple[int, float]]:
        """(row id, score) best first: fused (or single-list) scores plus exact-identifier boosts."""
        if mode is not SearchMode.HYBRID:
            scores = dict(found.lexical if mode is SearchMode.LEXICAL else found.dense)
            return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        scores = fuse(found.lexical, found.dense, self._weights)
        for rowid, kinds in found.exact.items():
            scores[rowid] = scores.get(rowid, 0.0) + IDENTIFIER_BOOST * len(set(kinds))
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]

    def _rank(self, notes: TenantNotes, request: SearchRequest, mode: SearchMode) -> list[_Ranked]:
        found = self.candidates(notes, request, mode)
        return [
            _Ranked(rowid, score, tuple(found.exact.get(rowid, ())))
            for rowid, score in self.order(found, request.top_k, mode)
        ]

    def _dense(self, notes: TenantNotes, query: str, where: NoteFilter) -> dict[int, float]:
        space = notes.vector_space()
        if space is not None and space != self._embedder.name:
            # Vectors from another table would rank at random; lexical and exact still work.
            _log.warning(
                "dense search skipped for tenant %s: %s",
                notes.tenant,
                VectorSpaceMismatchError(notes.tenant, space, self._embedder.name),
            )
            return {}
        vectors = notes.vectors()
        if vectors is None or len(vectors.rowids) == 0:
            return {}
        q = self._embedder.encode([query])[0]
        if not q.any():
            return {}
        return nearest(vectors, q, where.mask(vectors), CANDIDATES)

    # -- rendering --------------------------------------------------------------------------

    def _render(self, notes: TenantNotes, ranked: list[_Ranked], query: str) -> list[SearchHit]:
        found = notes.get([r.rowid for r in ranked])
        snippet = Highlighter(lexical_terms(query), SNIPPET_TOKENS, HIGHLIGHT)
        hits: list[SearchHit] = []
        for r in ranked:
            note = found.get(r.rowid)
            if note is None:
                continue
            hits.append(
                SearchHit(
                    note_id=note.note_id,
                    case_id=note.case_id,
                    created_at=note.created_at.isoformat(),
                    score=round(r.score, 6),
                    snippet=snippet(note.text),
                    subjects=_subjects_first_matching(note, r.matched, query),
                    matched_identifiers=sorted({m.split(":", 1)[0] for m in r.matched}),
                    typologies=list(note.typologies),
                )
            )
        return hits


def _subjects_first_matching(note: CaseNote, matched: tuple[str, ...], query: str) -> list[Subject]:
    """The note's subjects, those the query named (exactly or by name) first."""
    values = {m.split(":", 1)[1] for m in matched}
    q_name = f" {normalise_name(query)} "

    def named(s: Subject) -> bool:
        name = normalise_name(s.name)
        account = normalise_identifier(s.account_id) if s.account_id else None
        return name in values or account in values or f" {name} " in q_name

    flags = [named(s) for s in note.subjects]
    return [s for s, f in zip(note.subjects, flags, strict=True) if f] + [
        s for s, f in zip(note.subjects, flags, strict=True) if not f
    ]
