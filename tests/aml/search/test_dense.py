"""Nearest notes with pseudo-relevance feedback: the query moves towards its nearest notes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.notes.model import TenantVectors
from aml_mcp.aml.search.dense import Feedback, nearest, nearest_with_feedback


def _unit(*xs: float) -> npt.NDArray[np.float32]:
    v = np.array(xs, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


# Row ids 10-13: A is nearest the query; B sits beside A; C and D are each nearer the query than B.
ROWS = {
    10: _unit(0.9, 0.44, 0.0),
    11: _unit(0.5, 0.87, 0.0),
    12: _unit(0.6, 0.0, 0.8),
    13: _unit(0.55, 0.0, -0.835),
}
QUERY = _unit(1.0, 0.0, 0.0)


def _vectors() -> TenantVectors:
    return TenantVectors(
        generation=1,
        rowids=np.array(list(ROWS), dtype=np.int64),
        matrix=np.stack(list(ROWS.values())),
        created_ts=np.zeros(len(ROWS)),
        coarse=None,
        coarse_basis=None,
        case_rows={},
        typology_rows={},
    )


def _order(scores: dict[int, float]) -> list[int]:
    return sorted(scores, key=lambda r: -scores[r])


def test_feedback_finds_the_neighbour_of_the_nearest_note() -> None:
    vectors = _vectors()
    assert _order(nearest(vectors, QUERY, None, 4)) == [10, 12, 13, 11]
    moved = nearest_with_feedback(vectors, QUERY, None, 4, Feedback(notes=1, weight=3.0))
    assert _order(moved)[:2] == [10, 11]
    # No feedback notes: the plain ranking.
    same = nearest_with_feedback(vectors, QUERY, None, 4, Feedback(notes=0, weight=3.0))
    assert same == nearest(vectors, QUERY, None, 4)


def test_feedback_notes_pass_the_filter_like_every_result() -> None:
    vectors = _vectors()
    keep = np.array([False, True, True, True])  # A filtered out: it may not steer the query either
    moved = nearest_with_feedback(vectors, QUERY, keep, 4, Feedback(notes=1, weight=3.0))
    assert 10 not in moved
    assert _order(moved)[0] == 12
    assert nearest_with_feedback(vectors, QUERY, np.zeros(4, dtype=np.bool_), 4) == {}
