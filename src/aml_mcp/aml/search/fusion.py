"""How lexical (BM25) and dense (cosine) candidate lists become one ranking.

Why weighted, not equal: on this corpus the dense ranking is much better than BM25 for
paraphrased questions, and an equal-weight fusion let BM25's keyword accidents drag good dense
hits down. The weights below are the ones `benchmarks/search_quality.py --tune` picked on the
tuning half of the labelled query set (see that file and the figures in its docstring); they are
the only place the tuned numbers live.
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


TUNED_WEIGHTS = FusionWeights(method=FusionMethod.SATURATED, lexical=0.15, dense=0.85, bm25_half=40.0)
"""Picked by `benchmarks/search_quality.py --tune` on the tuning half of the labelled set
(demo corpus, 10k notes x 3 banks, seed 20260804, shipped 192-dim table): among 84 settings
(RRF k=10/30/60, min-max score fusion, saturated fusion K=2..40; lexical weight 0..1), the best
keyword-query nDCG@10 that keeps paraphrase nDCG@10 within 3% of dense-only and exact-id top-1
at 100%. On all queries: paraphrase nDCG@10 hybrid 0.481 vs BM25 0.064 vs dense 0.491; keyword
0.912 vs BM25 0.990 vs dense 0.841; exact-id top-1 1.000 (BM25 0.844). Averaging the two
free-text kinds instead picked a BM25-heavy RRF (0.4/0.6) that lost ~6% on paraphrases: the
"equal-ish fusion drags a good dense ranking down" effect."""


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
