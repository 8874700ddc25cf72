"""Both long tools report progress and stop within a second of `tasks/cancel`, mid-run (in-process).

The server drafts with `SlowDrafter` (plugged in through `aml.drafter`, 40 ms per case), so a run
lasts a couple of seconds: long enough to cancel half-way, and to see that drafting really stops.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.aml.demo.corpus import DemoNote
from tests.aml.tools import slow_drafter
from tests.aml.tools.aml_client import A, AmlClient, B, aml_server, cases_of
from tests.support.oauth import TestIssuer
from tests.support.waiting import eventually

PROGRESS = re.compile(r"^drafted (\d+)/(\d+) cases$")


@pytest.fixture(scope="module")
def aml(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, demo_data: Path) -> Iterator[AmlClient]:
    drafter = f"{slow_drafter.__name__}:SlowDrafter"
    with aml_server(tmp_path_factory.mktemp("aml-cancel"), issuer, demo=demo_data, drafter=drafter) as client:
        yield client


def _cancel_mid_run(aml: AmlClient, task_id: str, *, tenant: str, scope: str) -> dict[str, Any]:
    """Wait until some but not all cases are drafted, cancel, and time how long the body takes to stop."""

    def mid_run() -> bool:
        state = aml.get(task_id, tenant=tenant, scope=scope)
        progress = PROGRESS.match(state.get("statusMessage") or "")
        if progress and 0 < int(progress.group(1)) < int(progress.group(2)):
            return True
        assert state["status"] == "working", state
        return False

    eventually(mid_run, timeout=20, what="the run to be part-way through")
    cancel_sent = time.monotonic()
    assert aml.task("tasks/cancel", task_id, tenant=tenant, scope=scope).status_code == 200
    stopped = aml.wait_for(task_id, "cancelled", "completed", tenant=tenant, scope=scope, within=5)
    latency = time.monotonic() - cancel_sent
    assert stopped["status"] == "cancelled", stopped
    assert latency < 1.0, f"took {latency:.2f}s to stop"
    drafted = len(slow_drafter.CALLS)
    time.sleep(4 * slow_drafter.DELAY_S + 0.1)
    assert len(slow_drafter.CALLS) == drafted, "drafting went on after the task was cancelled"
    assert "result" not in stopped
    return stopped


@pytest.mark.slow
def test_eval_reports_progress_and_stops_within_a_second_of_cancel(aml: AmlClient) -> None:
    task_id = aml.start("run_full_eval", {"save_as_baseline": True}, tenant=A, scope="aml:eval")
    _cancel_mid_run(aml, task_id, tenant=A, scope="aml:eval")

    # The cancelled run saved no baseline: a complete run after it finds none.
    again = aml.start("run_full_eval", {}, tenant=A, scope="aml:eval")
    report = aml.wait_for(again, "completed", tenant=A, scope="aml:eval")["result"]["structuredContent"]
    assert report["baseline"] is None and report["cases"] > 20


def test_draft_batch_stops_within_a_second_of_cancel(
    aml: AmlClient, demo_notes: dict[str, list[DemoNote]]
) -> None:
    complete = [
        case_id
        for case_id, notes in cases_of(demo_notes[B]).items()
        if all(s.date_of_birth and s.account_id for s in notes[0].subjects)
    ]
    assert len(complete) > 20
    task_id = aml.start("draft_sar_batch", {"case_ids": complete}, tenant=B, scope="aml:draft")
    _cancel_mid_run(aml, task_id, tenant=B, scope="aml:draft")
