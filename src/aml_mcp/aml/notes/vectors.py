"""A bank's note vectors as dense search holds them in memory, built from the rows a store returns.

Both stores keep each note's embedding as float16 bytes beside the note and hand back the same
rows (row id, embedding, creation time, case, typology column); this turns them into one
`TenantVectors`, so the two backends cannot drift in how a matrix, its filters' row positions or
its coarse projection are made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.notes.model import TenantVectors

COARSE_FROM = 30_000
"""Tenants with at least this many notes get a coarse matrix for two-stage dense search."""
COARSE_DIMS = 64

VectorRow = tuple[int, bytes, float, str, str]
"""(row id, float16 embedding bytes, created_ts, case id, typology column `|a|b|`), in row order."""


def load_vectors(generation: int, rows: Sequence[VectorRow], space: str | None = None) -> TenantVectors:
    """The in-memory vectors of a bank at `generation`, made in `space`, from its rows in row order."""
    if not rows:
        return TenantVectors(
            generation,
            np.zeros(0, np.int64),
            np.zeros((0, 0), np.float32),
            np.zeros(0, np.float64),
            None,
            None,
            {},
            {},
            space,
        )
    dim = len(rows[0][1]) // 2
    buf = b"".join(r[1] for r in rows)
    matrix = np.frombuffer(buf, dtype=np.float16).reshape(len(rows), dim).astype(np.float32)
    cases: dict[str, list[int]] = {}
    typologies: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        cases.setdefault(row[3], []).append(position)
        for code in row[4].split("|"):
            if code:
                typologies.setdefault(code, []).append(position)
    basis = _principal_directions(matrix) if len(rows) >= COARSE_FROM else None
    return TenantVectors(
        generation=generation,
        rowids=np.fromiter((r[0] for r in rows), np.int64, len(rows)),
        matrix=matrix,
        created_ts=np.fromiter((r[2] for r in rows), np.float64, len(rows)),
        coarse=None if basis is None else np.ascontiguousarray(matrix @ basis),
        coarse_basis=basis,
        case_rows={k: np.asarray(v, dtype=np.int64) for k, v in cases.items()},
        typology_rows={k: np.asarray(v, dtype=np.int64) for k, v in typologies.items()},
        space=space,
    )


def _principal_directions(matrix: npt.NDArray[np.float32], sample: int = 8192) -> npt.NDArray[np.float32]:
    """The `COARSE_DIMS` directions along which the tenant's vectors vary most (a 384 x 64 basis).

    Why: a transformer's dimensions are not ordered by importance (the static table's, made by PCA,
    are), so the coarse pass projects both notes and query onto the tenant's own leading principal
    directions; dot products there approximate the full cosine well enough to keep the best
    `COARSE_KEEP` rows, which are then scored exactly. A fixed stride sample keeps it deterministic.
    """
    rows = matrix[:: max(1, len(matrix) // sample)]
    second_moment = rows.T.astype(np.float64) @ rows.astype(np.float64)
    _, vectors = np.linalg.eigh(second_moment)
    basis: npt.NDArray[np.float32] = np.ascontiguousarray(vectors[:, ::-1][:, :COARSE_DIMS], dtype=np.float32)
    return basis


__all__ = ["COARSE_DIMS", "COARSE_FROM", "VectorRow", "load_vectors"]
