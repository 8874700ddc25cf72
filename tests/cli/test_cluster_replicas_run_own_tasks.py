"""A cluster whose replicas run the tasks they create (`running_cluster(role="all")`, no worker):
what the scale-out benchmark compares with API replicas and workers. Two replicas on the shared
PostgreSQL behind HAProxy; tasks created through the balancer complete with nobody else to run
them, and each is readable on every replica. An unknown role is refused before anything starts."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.cluster import running_cluster
from tests.support.mcp_http import create, task_request
from tests.support.postgres import check_reachable, database_url


@pytest.mark.scaleout
@pytest.mark.slow
def test_replicas_of_role_all_complete_their_own_tasks(tmp_path: Path) -> None:
    url = database_url()
    check_reachable(url)
    with running_cluster(replicas=2, workers=0, role="all", database_url=url, work_dir=tmp_path) as cluster:
        assert cluster.workers == []
        with httpx.Client(base_url=cluster.url.removesuffix("/mcp"), timeout=10) as balancer:
            made = [
                create(balancer, "slow_compute", {"seconds": 0.1, "label": f"own-{n}"})["taskId"]
                for n in range(6)
            ]
        replicas = [
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) for port, _ in cluster.replicas
        ]
        try:
            deadline, finished = time.monotonic() + 30, set()
            while time.monotonic() < deadline and finished != set(made):
                for task_id in set(made) - finished:
                    seen = {_status(replica, task_id) for replica in replicas}
                    if seen == {"completed"}:
                        finished.add(task_id)
                time.sleep(0.1)
        finally:
            for replica in replicas:
                replica.close()
    assert finished == set(made), "a task no replica ran (there is no worker)"


def _status(replica: httpx.Client, task_id: str) -> str:
    answer = task_request(replica, "tasks/get", task_id)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["result"]["status"])


def test_an_unknown_role_is_refused() -> None:
    with (
        pytest.raises(ValueError, match="role"),
        running_cluster(
            replicas=1, workers=0, role="worker", database_url="postgresql://nobody@127.0.0.1:1/none"
        ),
    ):
        pass
