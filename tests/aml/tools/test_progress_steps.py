"""Both long tools report at least ten distinct steps over a run, with their demo inputs.

Counted where the body reports them (`TaskContext.report_progress`, before the runner's throttle):
`run_full_eval` on a demo bank (each phase reports at least `PROGRESS_STEPS` times, however fast the
machine), and `draft_sar_batch` on the documented demo call — one of the caller's cases that needs a
date of birth and another bank's case — answered once. Every step's numbers are counts (done never
above total) and its message names no case id and no fact.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import DemoNote
from aml_mcp.aml.evaluation.run import PROGRESS_STEPS
from aml_mcp.tasks.task_context import TaskContext
from tests.aml.tools.aml_client import A, AmlClient, B, aml_server, cases_of
from tests.support.aml_live import case_needing_dob
from tests.support.oauth import TestIssuer

Step = tuple[str, float, float | None, str | None]


@pytest.fixture(scope="module")
def aml(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, demo_data: Path) -> Iterator[AmlClient]:
    with aml_server(tmp_path_factory.mktemp("aml-steps"), issuer, demo=demo_data) as client:
        yield client


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[Step]:
    """Every progress report of every task body, as (tool, done, total, message)."""
    reported: list[Step] = []
    original = TaskContext.report_progress

    async def recording(
        self: TaskContext, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        reported.append((self._job.task.tool, progress, total, message))
        await original(self, progress, total, message)

    monkeypatch.setattr(TaskContext, "report_progress", recording)
    return reported


def _distinct(steps: list[Step], tool: str) -> list[Step]:
    mine = [step for step in steps if step[0] == tool]
    assert all(total is None or 0 <= done <= total for _, done, total, _ in mine), mine
    return list(dict.fromkeys(mine))


def test_run_full_eval_reports_at_least_ten_steps(aml: AmlClient, steps: list[Step]) -> None:
    task_id = aml.start("run_full_eval", {}, tenant=A, scope="aml:eval")
    assert aml.wait_for(task_id, "completed", tenant=A, scope="aml:eval")["status"] == "completed"
    distinct = _distinct(steps, "run_full_eval")
    assert len(distinct) >= 10, distinct
    drafted = [step for step in distinct if (step[3] or "").startswith("drafted ")]
    assert len(drafted) >= min(PROGRESS_STEPS, int(distinct[0][2] or 0)), drafted
    assert any((step[3] or "").startswith("graded ") for step in distinct)


def test_draft_sar_batch_reports_at_least_ten_steps_on_the_demo_call(
    aml: AmlClient, steps: list[Step], demo_notes: dict[str, list[DemoNote]]
) -> None:
    own = case_needing_dob(cases_of(demo_notes[A]))
    foreign = next(iter(cases_of(demo_notes[B])))
    task_id = aml.start("draft_sar_batch", {"case_ids": [own, foreign]}, tenant=A, scope="aml:draft")
    waiting = aml.wait_for(task_id, "input_required", tenant=A, scope="aml:draft")
    [key] = waiting["inputRequests"]
    answer: dict[str, Any] = {key: {"action": "accept", "content": {"date_of_birth": "1970-01-02"}}}
    assert (
        aml.task("tasks/update", task_id, tenant=A, scope="aml:draft", inputResponses=answer).status_code
        == 200
    )
    done = aml.wait_for(task_id, "completed", tenant=A, scope="aml:draft")
    assert done["result"]["structuredContent"]["drafted"] == 1
    distinct = _distinct(steps, "draft_sar_batch")
    assert len(distinct) >= 10, distinct
    for _, _, _, message in distinct:
        assert message and own not in message and foreign not in message and "1970" not in message
