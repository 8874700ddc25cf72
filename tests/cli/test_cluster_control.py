"""Cancellations and answers reach the worker that runs the task at once, not at its next heartbeat.

Two API replicas and one worker behind HAProxy, with a heartbeat of a minute: without the control
notification the worker would learn of a cancellation or of answers stored by a replica only when
it next renews its leases, a minute later. The test allows 20 s (a loaded machine), so it can only
pass if the notification, not the heartbeat, brought the news.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from psycopg import sql

from aml_mcp.cli.cluster import Cluster, running_cluster
from tests.support.mcp_http import create, get, task_request
from tests.support.postgres import check_reachable, database_url
from tests.support.waiting import eventually

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

SLOW_HEARTBEAT = {
    "AML_MCP_TASKS__HEARTBEAT_MS": "60000",
    "AML_MCP_TASKS__LEASE_MS": "120000",
}
NEWS_WITHIN_S = 20.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    url = database_url()
    check_reachable(url)
    with running_cluster(
        replicas=2,
        workers=1,
        database_url=url,
        catalog="conformance",
        work_dir=tmp_path_factory.mktemp("control"),
        env=SLOW_HEARTBEAT,
    ) as running:
        yield running


def _replicas(cluster: Cluster) -> tuple[httpx.Client, httpx.Client]:
    (first, _), (second, _) = cluster.replicas
    return (
        httpx.Client(base_url=f"http://127.0.0.1:{first}", timeout=10),
        httpx.Client(base_url=f"http://127.0.0.1:{second}", timeout=10),
    )


def _held_by_the_worker(cluster: Cluster, task_id: str) -> None:
    """Wait until a runner holds the task's lease (read past the server, in the cluster's schema)."""

    def holder() -> str | None:
        with psycopg.connect(database_url(), autocommit=True) as conn:
            query = sql.SQL("SELECT lease_holder FROM {}.tasks WHERE task_id = %s").format(
                sql.Identifier(cluster.schema)
            )
            row = conn.execute(query, (task_id,)).fetchone()
        return None if row is None else row[0]

    eventually(holder, until=lambda found: found is not None, timeout=30, what="the worker to claim")


def _ends(client: httpx.Client, task_id: str) -> dict[str, Any]:
    return eventually(
        lambda: get(client, task_id),
        until=lambda state: state["status"] in ("completed", "failed", "cancelled"),
        timeout=NEWS_WITHIN_S,
        interval=0.1,
        what=f"task {task_id[:8]} to end",
    )


def test_a_cancel_on_one_replica_stops_the_body_on_the_worker_at_once(cluster: Cluster) -> None:
    a, b = _replicas(cluster)
    with a, b:
        task_id = create(a, "slow_compute", {"seconds": 600, "label": "never"})["taskId"]
        # Running on the worker: it holds the lease, so the cancel only records the intent.
        _held_by_the_worker(cluster, task_id)
        response = task_request(b, "tasks/cancel", task_id)
        assert response.status_code == 200 and "error" not in response.json(), response.text
        ended = _ends(a, task_id)
    assert ended["status"] == "cancelled", ended


def test_answers_stored_on_one_replica_reach_the_body_on_the_worker_at_once(cluster: Cluster) -> None:
    a, b = _replicas(cluster)
    with a, b:
        task_id = create(a, "confirm_delete", {"filename": "ledger.csv"})["taskId"]
        waiting = eventually(
            lambda: get(b, task_id),
            until=lambda state: state["status"] == "input_required",
            timeout=30,
            what="the worker to ask",
        )
        (key,) = waiting["inputRequests"]
        answer = {key: {"action": "accept", "content": {"confirm": True}}}
        response = task_request(b, "tasks/update", task_id, extra={"inputResponses": answer})
        assert response.status_code == 200 and "error" not in response.json(), response.text
        ended = _ends(a, task_id)
    assert ended["status"] == "completed", ended
    assert ended["result"]["content"][0]["text"] == "Deleted ledger.csv."
