"""D1: a task body whose notes queries lose their connection runs again; it never fails for it.

The review's reproduction, on a server of the test's own: `draft_sar_batch` tasks (each reads its
cases from the shared notes store) run on one process on PostgreSQL, and every aml-mcp connection
is terminated three times while the bodies run — the notes pool, the task pool, the listener and the
audit connection alike. Before the fix the notes store's outage error was taken for a bug in the
tool: 7-8 tasks per termination ended `failed` with "Internal error" (here 11 and 12 of 30). Now
every task completes (each stopped body runs again in place, no attempt counted).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.settings import TaskSettings
from tests.aml.tools.aml_client import NOTES_PER_BANK, A, AmlClient
from tests.support.aml_live import demo_cases_by_bank
from tests.support.mcp_http import TASKS_ONLY
from tests.support.oauth import TestIssuer, secured_server
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.faults

SCHEMA = "d1_tasks"
SETTINGS = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK)
TASKS = TaskSettings(poll_interval_ms=50, heartbeat_ms=200, lease_ms=2_000, claim_interval_ms=300)
TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture(scope="module")
def aml(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[AmlClient]:
    with PostgresNotes(PostgresDatabase(private_postgres.url, schema=SCHEMA)) as store:
        load_demo_if_empty(SETTINGS, tmp_path_factory.mktemp("unused"), store=store)
    shared: dict[str, Any] = {"database_url": private_postgres.url, "database_schema": SCHEMA, "tasks": TASKS}
    with secured_server(
        tmp_path_factory.mktemp("d1"),
        None,
        issuer=issuer,
        aml=SETTINGS,
        real_socket=True,
        **shared,
    ) as server:
        yield AmlClient(server)


def states(pg: PrivatePostgres, task_ids: list[str]) -> dict[str, tuple[str, str | None, int]]:
    with pg.connect() as conn:
        rows = conn.execute(
            f"SELECT task_id, status, status_message, attempts FROM {SCHEMA}.tasks WHERE task_id = ANY(%s)",  # noqa: S608
            (task_ids,),
        ).fetchall()
    return {row[0]: (row[1], row[2], row[3]) for row in rows}


def start(aml: AmlClient, case_ids: list[str]) -> str:
    """Create a draft task as a client does across a database fault: a create refused with a 503
    (`Retry-After`) or a retryable storage error kept nothing, so it is sent again."""
    for _ in range(100):
        response = aml.call(
            "draft_sar_batch", {"case_ids": case_ids}, tenant=A, scope="aml:draft", capabilities=TASKS_ONLY
        )
        body = response.json()
        if "result" in body:
            task_id: str = body["result"]["taskId"]
            return task_id
        retryable = body["error"].get("data", {}).get("retryable") is True
        assert retryable or "retry-after" in response.headers, (response.status_code, body)
        time.sleep(0.05)
    raise AssertionError("the create was refused 100 times")


def test_draft_bodies_whose_notes_connections_are_terminated_all_complete(
    aml: AmlClient, private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    cases = sorted(demo_cases_by_bank()[A])
    terminated: list[int] = []

    def terminate_while_bodies_run() -> None:
        for pause in (0.15, 0.25, 0.3):
            time.sleep(pause)
            terminated.append(private_postgres.terminate_all())

    resets = threading.Thread(target=terminate_while_bodies_run)
    resets.start()
    # Each body reads every case of the bank, one notes query per case, in a different order.
    task_ids = [start(aml, cases[i:] + cases[:i]) for i in range(30)]
    resets.join()
    assert len(terminated) == 3 and all(count > 0 for count in terminated), terminated

    deadline = time.monotonic() + 90
    seen = states(private_postgres, task_ids)
    while time.monotonic() < deadline and not all(s[0] in TERMINAL for s in seen.values()):
        time.sleep(0.2)
        seen = states(private_postgres, task_ids)
    failed = {task_id[:8]: state for task_id, state in seen.items() if state[0] != "completed"}
    attempts = sorted(state[2] for state in seen.values())
    print(f"terminated {terminated}; not completed {len(failed)} of {len(task_ids)}; attempts {attempts}")
    assert len(seen) == len(task_ids)
    assert not failed, failed
    # The resets did reach running bodies: they were stopped by them and run again.
    stopped = [r for r in caplog.records if "stopped by a storage failure" in r.getMessage()]
    assert stopped, "no body met a terminated connection: the test proved nothing"
