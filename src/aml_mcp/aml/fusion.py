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


@dataclass(frozen=True, slots=True)
class FusionWeights:
    method: FusionMethod
    lexical: float
    dense: float
    rrf_k: float = 60.0


TUNED_WEIGHTS = FusionWeights(method=FusionMethod.SCORE, lexical=0.3, dense=0.7)
"""Tuned on the labelled set's tuning split by `benchmarks/search_quality.py --tune`."""


def fuse(
    lexical: Mapping[int, float],
    dense: Mapping[int, float],
    weights: FusionWeights,
) -> dict[int, float]:
    """Combined score per row id from `lexical` (BM25, larger is better) and `dense` (cosine)."""
    if weights.method is FusionMethod.RRF:
        return _rrf(lexical, dense, weights)
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
