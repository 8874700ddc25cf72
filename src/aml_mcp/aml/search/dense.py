"""Nearest notes to a query vector within one tenant's matrix: exact, or two-stage when large.

Why two stages: a matrix-vector product is memory-bound, and at 100k notes x 384 dims it reads
150 MB per query. Projected onto the tenant's leading principal directions (`coarse_basis`,
computed when its vectors are loaded), a note vector keeps most of its signal in a sixth of the
bytes: a first pass over that projection keeps `COARSE_KEEP` rows, and only those are scored
exactly. Below `COARSE_FROM` notes the exact product is already cheap and is used alone.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.note_store import TenantVectors

COARSE_KEEP = 2000


def _top(scores: npt.NDArray[np.float32], depth: int) -> npt.NDArray[np.intp]:
    if depth >= len(scores):
        return np.arange(len(scores))
    return np.argpartition(-scores, depth - 1)[:depth]


def nearest(
    vectors: TenantVectors,
    query: npt.NDArray[np.float32],
    keep: npt.NDArray[np.bool_] | None,
    depth: int,
) -> dict[int, float]:
    """Row id -> cosine for the `depth` notes closest to `query` among rows where `keep` is true."""
    available = len(vectors.rowids) if keep is None else int(keep.sum())
    depth = min(depth, available)
    if depth <= 0:
        return {}
    if vectors.coarse is not None and vectors.coarse_basis is not None and available > COARSE_KEEP:
        rough = vectors.coarse @ (query @ vectors.coarse_basis)
        if keep is not None:
            rough = np.where(keep, rough, -np.inf).astype(np.float32)
        rows = _top(rough, COARSE_KEEP)
        rows = rows[np.isfinite(rough[rows])]
        exact = vectors.matrix[rows] @ query
        best = _top(exact, depth)
        return {int(vectors.rowids[rows[i]]): float(exact[i]) for i in best}
    sims = vectors.matrix @ query
    if keep is not None:
        sims = np.where(keep, sims, -np.inf).astype(np.float32)
    best = _top(sims, depth)
    return {int(vectors.rowids[i]): float(sims[i]) for i in best if np.isfinite(sims[i])}
