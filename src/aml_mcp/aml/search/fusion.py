"""How lexical (BM25) and dense (cosine) candidate lists become one ranking.

Why reciprocal-rank fusion: it needs no score calibration (BM25 and cosine live on unrelated
scales, and a per-query min-max stretches a query whose words barely occur into a full lexical
vote), and it has only two parameters, so it can be chosen on a small dev set without overfitting.
The old pipeline's saturated score fusion, tuned on the demo templates, scored below its own
lexical half on analyst prose. The weights below are the ones `benchmarks/search_quality.py` picked
on the dev halves of both labelled sets; the figures quoted are the test halves'.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class FusionMethod(StrEnum):
    RRF = "rrf"
    """Weighted reciprocal-rank fusion: w / (k + rank)."""
    SCORE = "score"
    """Weighted sum of per-list normalised scores (BM25 over its max; cosine min-max)."""
    SATURATED = "saturated"
    """Weighted sum of BM25 squashed as s/(s+K) and raw cosine: no per-query rescaling, so a
    query whose words barely occur keeps a small lexical score instead of being stretched to 1."""


@dataclass(frozen=True, slots=True)
class FusionWeights:
    method: FusionMethod
    lexical: float
    dense: float
    rrf_k: float = 60.0
    bm25_half: float = 10.0
    """K of the saturated method: the BM25 score that counts as half a lexical match."""


TUNED_WEIGHTS = FusionWeights(method=FusionMethod.RRF, lexical=0.1, dense=0.9, rrf_k=5.0)
"""Picked by `benchmarks/search_quality.py` on the dev halves only (analyst-prose set and demo set at
1,000 notes per bank, MiniLM int8 vectors, with the engine's all-terms lift and the dense half's
feedback applied): among RRF k in {5, 10, 20, 30, 60} and lexical weight 0.1-0.6, the best mean
dev nDCG@10 over the four free-text groups (prose paraphrase and mixed, demo paraphrase and
keyword) with every dev identifier query answered top-1 (dev mean 0.830; k 10 / weight 0.2, the
choice before the feedback, 0.827). Dense-heavy because the transformer is the better ranker for
questions; keyword queries are served by the all-terms lift (`engine.ALL_TERMS_BOOST`) rather
than by a larger lexical weight, which cost paraphrases more than it gave keywords. The
feedback's own setting (`dense.FEEDBACK`), re-checked under these weights, stays the best.
Test-half figures are in docs/aml-tools.md."""


def fuse(
    lexical: Mapping[int, float],
    dense: Mapping[int, float],
    weights: FusionWeights,
) -> dict[int, float]:
    """Combined score per row id from `lexical` (BM25, larger is better) and `dense` (cosine)."""
    if weights.method is FusionMethod.RRF:
        return _rrf(lexical, dense, weights)
    if weights.method is FusionMethod.SATURATED:
        return _saturated(lexical, dense, weights)
    return _score(lexical, dense, weights)


def _ranks(scores: Mapping[int, float]) -> dict[int, int]:
    ordered = sorted(scores, key=lambda r: (-scores[r], r))
    return {rowid: rank for rank, rowid in enumerate(ordered, start=1)}


def _rrf(lexical: Mapping[int, float], dense: Mapping[int, float], w: FusionWeights) -> dict[int, float]:
    out: dict[int, float] = {}
    for scores, weight in ((lexical, w.lexical), (dense, w.dense)):
        if weight == 0:
            continue
        for rowid, rank in _ranks(scores).items():
            out[rowid] = out.get(rowid, 0.0) + weight / (w.rrf_k + rank)
    return out


def _score(lexical: Mapping[int, float], dense: Mapping[int, float], w: FusionWeights) -> dict[int, float]:
    out: dict[int, float] = {}
    if lexical and w.lexical:
        top = max(lexical.values())
        if top > 0:
            for rowid, s in lexical.items():
                out[rowid] = out.get(rowid, 0.0) + w.lexical * max(s, 0.0) / top
    if dense and w.dense:
        hi, lo = max(dense.values()), min(dense.values())
        span = hi - lo
        for rowid, s in dense.items():
            norm = (s - lo) / span if span > 0 else 1.0
            out[rowid] = out.get(rowid, 0.0) + w.dense * norm
    return out


def _saturated(
    lexical: Mapping[int, float], dense: Mapping[int, float], w: FusionWeights
) -> dict[int, float]:
    out: dict[int, float] = {}
    for rowid, s in lexical.items():
        s = max(s, 0.0)
        out[rowid] = w.lexical * s / (s + w.bm25_half)
    for rowid, c in dense.items():
        out[rowid] = out.get(rowid, 0.0) + w.dense * max(c, 0.0)
    return out
