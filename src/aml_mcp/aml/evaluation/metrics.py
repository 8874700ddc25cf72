"""Retrieval metrics over graded relevance, shared by the benchmark and the eval task.

Recall@k is *capped* (divided by `min(k, |relevant|)`), because a behaviour query in a large bank
has hundreds of relevant notes and plain recall@10 could never exceed a few percent; capped
recall asks "how much of what could fit in the top k is relevant". nDCG@k uses gains
`2^grade - 1` and the ideal ordering of all graded notes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def recall_at_k(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    relevant = [n for n, g in relevance.items() if g > 0]
    if not relevant:
        return 0.0
    hits = sum(1 for n in ranked[:k] if relevance.get(n, 0) > 0)
    return hits / min(k, len(relevant))


def ndcg_at_k(ranked: Sequence[str], relevance: Mapping[str, int], k: int = 10) -> float:
    def gain(grade: int) -> float:
        return float(2**grade - 1)

    dcg = sum(gain(relevance.get(n, 0)) / math.log2(i + 2) for i, n in enumerate(ranked[:k]))
    ideal = sorted((g for g in relevance.values() if g > 0), reverse=True)[:k]
    idcg = sum(gain(g) / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def top1_hit(ranked: Sequence[str], relevance: Mapping[str, int]) -> bool:
    return bool(ranked) and relevance.get(ranked[0], 0) > 0
