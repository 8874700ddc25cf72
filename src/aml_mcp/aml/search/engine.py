"""Hybrid search over one tenant's case notes: BM25 + dense cosine, fused, with exact-id boosts.

The flow for one query:

1. lexical candidates: FTS5 BM25 over the tenant's own index (filters applied in SQL);
2. dense candidates: cosine of the query vector against the tenant's stored note vectors
   (filters applied as a mask), computed with one matrix-vector product;
3. fusion with the tuned weights of `fusion.TUNED_WEIGHTS`;
4. exact identifiers in the query (account ids, case/note ids, names) looked up in the tenant's
   identifier index; notes that carry one are lifted above every non-matching note.

A search needs a `TenantNoteAccess`, which only a store's `tenant(<verified tenant>)` makes: there is
no argument through which a caller could name another tenant.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from aml_mcp.aml.notes.model import (
    CaseNote,
    LexicalHalf,
    NoteFilter,
    Subject,
    TenantVectors,
    VectorSpaceMismatchError,
    normalise_identifier,
    normalise_name,
    normalise_typology,
    parse_iso_bound,
)
from aml_mcp.aml.notes.storage import TenantNoteAccess
from aml_mcp.aml.search.choice import Embedders
from aml_mcp.aml.search.dense import FEEDBACK, Feedback, nearest_with_feedback
from aml_mcp.aml.search.embeddings import Embedder
from aml_mcp.aml.search.fusion import TUNED_WEIGHTS, FusionWeights, fuse
from aml_mcp.aml.search.identifiers import identifier_candidates
from aml_mcp.aml.search.lexical import CountedOnce, all_terms_expression, lexical_terms, match_expression
from aml_mcp.aml.search.snippets import Highlighter

_log = logging.getLogger(__name__)

MAX_TOP_K = 50
CANDIDATES = 100
"""Depth of each candidate list before fusion: deep enough that fusion can reorder, cheap at 100k."""
IDENTIFIER_BOOST = 10.0
"""Added per distinct exact identifier matched; fused scores are below ~1, so matches always lead."""
ALL_TERMS_BOOST = 1.0
"""Added to a note holding every word of a query typed in the bank's own words
(`lexical.all_terms_expression`): above any fused score (< 1), below an identifier match.

Why: reciprocal-rank fusion gives BM25 a fifth of the vote, so a keyword query whose words sit
verbatim in a handful of notes saw those notes out-voted by the dense half's looser neighbours
(demo keyword nDCG@10 0.81 against 0.98 for BM25 alone). The rule needs no weight and changes
nothing for a paraphrase, which almost never uses only words the bank's notes contain."""
OVERLAP_FROM = 20_000
"""Banks with fewer notes compute the dense list on the search's own thread: their index lookups
take 1-2 ms, less than handing the work to another thread costs in CPU (about 2-3 ms measured at
10k notes per bank, against 10 ms of lookups saved at 100k)."""
SNIPPET_TOKENS = 24
HIGHLIGHT = ("**", "**")
"""Markdown bold: the assistants that read results render or understand it."""


class SearchMode(StrEnum):
    HYBRID = "hybrid"
    LEXICAL = "lexical"
    DENSE = "dense"


def _check_bound(value: str | None, info: ValidationInfo) -> str | None:
    """The bound must be representable as the instant it stands for: `date_to` `9999-12-31` is the
    end of that day, one microsecond before year 10000, and computing it overflows (an OverflowError,
    which pydantic would not report as a validation error)."""
    if value is None:
        return None
    try:
        parse_iso_bound(value, end=info.field_name == "date_to")
    except (ValueError, OverflowError):
        raise ValueError("must be an ISO 8601 date (YYYY-MM-DD) or date-time within years 1-9999") from None
    return value


class SearchRequest(BaseModel):
    """The arguments of `search_aml_notes` (the tenant is never one of them).

    The tool's input schema is generated from this model (`catalog.arguments`), so the contract an
    assistant reads and the validation the body runs are one definition.
    """

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    query: str = Field(
        min_length=1,
        max_length=1000,
        description="What to look for, in any words, or an account id, name or case id.",
    )
    top_k: int = Field(
        default=10, ge=1, le=MAX_TOP_K, description=f"How many notes to return (1-{MAX_TOP_K})."
    )
    date_from: str | None = Field(
        default=None,
        max_length=40,
        description="Earliest note date, inclusive: YYYY-MM-DD or an ISO 8601 date-time.",
    )
    date_to: str | None = Field(
        default=None,
        max_length=40,
        description="Latest note date, inclusive: YYYY-MM-DD or an ISO 8601 date-time.",
    )
    typology: str | None = Field(
        default=None,
        min_length=1,
        max_length=100,
        description="Only notes with this typology code, e.g. structuring or crypto_mixing.",
    )
    case_id: str | None = Field(
        default=None, min_length=1, max_length=128, description="Only notes of this case."
    )

    _bounds = field_validator("date_from", "date_to")(_check_bound)

    @model_validator(mode="before")
    @classmethod
    def _omitted_not_null(cls, data: Any) -> Any:
        """An optional filter is left out, never `null` (as the generated input schema says)."""
        if isinstance(data, dict):
            nulls = sorted(str(key) for key, value in data.items() if value is None)
            if nulls:
                raise ValueError(f"leave out rather than send null: {', '.join(nulls)}")
        return data

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
    matched_subjects: list[str] = Field(
        default_factory=list,
        description="Names of the note's subjects the query named (by name or account), in note order.",
    )
    matched_identifiers: list[str] = Field(
        default_factory=list, description="Exact identifiers from the query found on this note."
    )
    typologies: list[str] = Field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Candidates:
    """Everything ranking needs for one query, gathered once (the benchmark re-fuses these)."""

    lexical: dict[int, float]
    """BM25 per row id, larger is better."""
    dense: dict[int, float]
    """Cosine per row id."""
    exact: dict[int, list[str]]
    """Row id -> `kind:value` identifiers from the query found on that note."""
    all_terms: frozenset[int] = frozenset()
    """Row ids of notes holding every word of a query typed in the bank's own words."""


@dataclass(frozen=True, slots=True)
class _Ranked:
    rowid: int
    score: float
    matched: tuple[str, ...]


class NoteSearch:
    """Hybrid search; holds only its dependencies (the embedders, the fusion weights, and where a
    query is embedded while the full-text index is read).

    Why `overlap`: the dense list (the query's transformer embedding, ~5-8 ms of one core, then
    the products over the tenant's vectors) and the FTS5 and identifier lookups (1-10 ms, growing
    with the bank) do not depend on each other, and onnxruntime, numpy and SQLite release the GIL.
    Computing the dense list on `overlap` while this thread reads the index makes a search cost
    about the longer of the two instead of their sum on an idle machine; the CPU time is the same.
    Without an executor, or for a bank under `overlap_from` notes, the two run one after the other.
    """

    def __init__(
        self,
        embedders: Embedder | Embedders,
        weights: FusionWeights = TUNED_WEIGHTS,
        overlap: Executor | None = None,
        feedback: Feedback | None = FEEDBACK,
        overlap_from: int = OVERLAP_FROM,
    ) -> None:
        self._embedders = embedders if isinstance(embedders, Embedders) else Embedders(embedders)
        self._weights = weights
        self._overlap = overlap
        self._overlap_from = overlap_from
        self._feedback = feedback if feedback is not None else Feedback(notes=0, weight=0.0)

    def search(
        self, notes: TenantNoteAccess, request: SearchRequest, mode: SearchMode = SearchMode.HYBRID
    ) -> list[SearchHit]:
        """The best `request.top_k` notes of the tenant behind `notes` for `request`."""
        return self._render(notes, self._rank(notes, request, mode), request.query)

    def rank_ids(
        self, notes: TenantNoteAccess, request: SearchRequest, mode: SearchMode = SearchMode.HYBRID
    ) -> list[str]:
        """Note ids only, in rank order (for evaluation, where snippets are waste)."""
        ranked = self._rank(notes, request, mode)
        found = notes.get([r.rowid for r in ranked])
        return [found[r.rowid].note_id for r in ranked if r.rowid in found]

    # -- ranking ----------------------------------------------------------------------------

    def candidates(self, notes: TenantNoteAccess, request: SearchRequest, mode: SearchMode) -> Candidates:
        """Lexical, dense and exact-identifier candidates of `request` within `notes`."""
        where = request.note_filter()
        dense_later = (
            self._start_dense(notes, request.query, where) if mode is not SearchMode.LEXICAL else None
        )
        terms = lexical_terms(request.query)
        counts = CountedOnce(notes)  # both expressions ask for the same words' counts
        match = match_expression(counts, terms) if mode is not SearchMode.DENSE else None
        every, values = None, []
        if mode is SearchMode.HYBRID:
            every, values = all_terms_expression(counts, terms), identifier_candidates(request.query)
        half = (
            notes.lexical_half(match, every, values, where, CANDIDATES)
            if match is not None or every is not None or values
            else LexicalHalf([], [], {})
        )
        dense = dense_later() if dense_later is not None else {}
        return Candidates(
            {h.rowid: -h.bm25 for h in half.hits}, dense, half.identifiers, frozenset(half.every)
        )

    def order(
        self, found: Candidates, top_k: int, mode: SearchMode = SearchMode.HYBRID
    ) -> list[tuple[int, float]]:
        """(row id, score) best first: fused (or single-list) scores plus exact-identifier boosts."""
        if mode is not SearchMode.HYBRID:
            scores = dict(found.lexical if mode is SearchMode.LEXICAL else found.dense)
            return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]
        scores = fuse(found.lexical, found.dense, self._weights)
        for rowid in found.all_terms:
            scores[rowid] = scores.get(rowid, 0.0) + ALL_TERMS_BOOST
        for rowid, kinds in found.exact.items():
            scores[rowid] = scores.get(rowid, 0.0) + IDENTIFIER_BOOST * len(set(kinds))
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top_k]

    def _rank(self, notes: TenantNoteAccess, request: SearchRequest, mode: SearchMode) -> list[_Ranked]:
        found = self.candidates(notes, request, mode)
        return [
            _Ranked(rowid, score, tuple(found.exact.get(rowid, ())))
            for rowid, score in self.order(found, request.top_k, mode)
        ]

    def _start_dense(
        self, notes: TenantNoteAccess, query: str, where: NoteFilter
    ) -> Callable[[], dict[int, float]] | None:
        """Start the dense list (embedding and nearest notes; on `overlap` if given); returns what
        waits for it, or None when the tenant has no vectors searchable in a loaded embedder's space."""
        vectors = notes.vectors()  # their space with them: one question of the store, not two
        if vectors is None or len(vectors.rowids) == 0:
            return None
        embedder = self._embedders.for_space(vectors.space)
        if embedder is None:
            # Vectors from another space would rank at random; lexical and exact still work.
            _log.warning(
                "dense search skipped for tenant %s: %s",
                notes.tenant,
                VectorSpaceMismatchError(notes.tenant, str(vectors.space), self._embedders.primary.name),
            )
            return None

        def dense() -> dict[int, float]:
            return _nearest(vectors, embedder.encode([query])[0], where, self._feedback)

        if self._overlap is None or len(vectors.rowids) < self._overlap_from:
            found = dense()
            return lambda: found
        return self._overlap.submit(dense).result

    # -- rendering --------------------------------------------------------------------------

    def _render(self, notes: TenantNoteAccess, ranked: list[_Ranked], query: str) -> list[SearchHit]:
        found = notes.get([r.rowid for r in ranked])
        snippet = Highlighter(lexical_terms(query), SNIPPET_TOKENS, HIGHLIGHT)
        spoken = f" {normalise_name(query)} "  # once per query, not once per hit
        hits: list[SearchHit] = []
        for r in ranked:
            note = found.get(r.rowid)
            if note is None:
                continue
            named = _named_subjects(note, r.matched, spoken)
            hits.append(
                SearchHit(
                    note_id=note.note_id,
                    case_id=note.case_id,
                    created_at=note.created_at.isoformat(),
                    score=round(r.score, 6),
                    snippet=snippet(note.text),
                    subjects=[s for s, f in named if f] + [s for s, f in named if not f],
                    matched_subjects=[s.name for s, f in named if f],
                    matched_identifiers=sorted({m.split(":", 1)[0] for m in r.matched}),
                    typologies=list(note.typologies),
                )
            )
        return hits


def _nearest(
    vectors: TenantVectors, q: npt.NDArray[np.float32], where: NoteFilter, feedback: Feedback
) -> dict[int, float]:
    if not q.any():
        return {}
    return nearest_with_feedback(vectors, q, where.mask(vectors), CANDIDATES, feedback)


def _named_subjects(note: CaseNote, matched: tuple[str, ...], spoken: str) -> list[tuple[Subject, bool]]:
    """Each of the note's subjects, and whether the query named it: exactly (its normalised name
    or account id is one of the query's identifier candidates the store found on this note, so
    the candidates need no second computation) or by name within `spoken`, the query's normalised
    name form padded with spaces, computed once per query."""
    values = {m.split(":", 1)[1] for m in matched}

    def named(s: Subject) -> bool:
        name = normalise_name(s.name)
        account = normalise_identifier(s.account_id) if s.account_id else None
        return name in values or account in values or f" {name} " in spoken

    return [(s, named(s)) for s in note.subjects]
