"""What drives `aml-mcp call`'s bar: aml-mcp's structured progress (`_meta["aml-mcp/progress"]`)
when the task carries a sound one, else an `n/m` in the status message (another server's), and on a
terminal the bar follows it."""

from __future__ import annotations

import io
from typing import Any

import pytest

from aml_mcp.cli.progress import LiveReporter, fraction
from aml_mcp.client import TaskState


def _state(message: str | None = None, progress: Any = None, status: str = "working") -> TaskState:
    meta = None if progress is None else {"aml-mcp/progress": progress}
    return TaskState.model_validate(
        {"taskId": "t1", "status": status, "statusMessage": message, "_meta": meta}
    )


def test_structured_progress_wins_over_the_message() -> None:
    assert fraction(_state("drafting 504 cases", {"done": 75, "total": 504})) == (75, 504)
    assert fraction(_state("drafted 1/2 cases", {"done": 3, "total": 4})) == (3, 4)


@pytest.mark.parametrize(
    "progress",
    [{"done": 5, "total": 4}, {"done": -1, "total": 4}, {"done": 1, "total": 0}, {"done": True, "total": 2},
     {"done": "1", "total": 2}, [1, 2], "1/2"],
)  # fmt: skip
def test_unsound_structured_progress_falls_back_to_the_message(progress: Any) -> None:
    assert fraction(_state("graded 7/167 queries", progress)) == (7, 167)
    assert fraction(_state("working", progress)) is None


def test_the_live_bar_follows_structured_progress() -> None:
    out = io.StringIO()
    reporter = LiveReporter(out)
    try:
        reporter.show(_state("drafting 504 cases", {"done": 252, "total": 504}))
        bar = reporter._progress.tasks[0]
        assert (bar.completed, bar.total) == (252, 504)
    finally:
        reporter.close()
