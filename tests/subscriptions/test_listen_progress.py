"""Progress reaches listening clients: a listen stream following `run_full_eval` hears the task move.

- On one process, over real HTTP (the AML tools on the demo corpus, auth on): while the task is
  `working`, the stream receives at least ten `notifications/tasks`, each with a status message and
  `_meta["aml-mcp/progress"]` different from the one before; `tasks/get` shows the same structured
  progress, and the final state keeps where the run ended.
- Through a cluster (`aml-mcp cluster`'s own code: one API replica, `serve --role api`, and one
  worker on a PostgreSQL schema of their own): the stream is held on the replica, the body runs on
  the worker, and its progress travels as NOTIFY and a lookup by id and owner on the replica.

The runner writes progress at most every `tasks.progress_interval_ms`; these tests set 50 ms so a
run of a couple of seconds on an idle machine has room for more than ten writes (at the 250 ms
default it has about eight; `tests/tasks/test_progress.py` checks the bound itself).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.cli.cluster import running_cluster
from aml_mcp.tasks.settings import TaskSettings
from tests.support.mcp_http import TASKS_EXTENSION, create, get, headers_for, message
from tests.support.oauth import TestIssuer, secured_server
from tests.support.postgres import check_reachable, database_url
from tests.support.sse import SseReader

PROGRESS = "aml-mcp/progress"
SUB_ID = "io.modelcontextprotocol/subscriptionId"
BANK = TENANTS[0].name
INTERVAL_MS = 50


def _listen(http: httpx.Client, task_id: str, token: str) -> Any:
    body = message(
        "subscriptions/listen",
        {"notifications": {"taskIds": [task_id]}},
        request_id="progress",
        capabilities={"extensions": {TASKS_EXTENSION: {}}},
    )
    headers = {**headers_for(body), "authorization": f"Bearer {token}"}
    return http.stream("POST", "/mcp", content=json.dumps(body), headers=headers)


def _follow(http: httpx.Client, task_id: str, token: str, timeout: float) -> list[dict[str, Any]]:
    """Every `notifications/tasks` params the stream carries for `task_id`, up to its final state."""
    heard: list[dict[str, Any]] = []
    with _listen(http, task_id, token) as response:
        assert response.status_code == 200, response.read()
        stream = SseReader(response)
        try:
            while True:
                note = stream.next(timeout=timeout)
                assert note is not None, f"the stream went quiet; heard {len(heard)} task notifications"
                if note.get("method") != "notifications/tasks":
                    continue
                params = note["params"]
                assert params["taskId"] == task_id and params["_meta"][SUB_ID] == "progress"
                heard.append(params)
                if params["status"] in ("completed", "failed", "cancelled"):
                    return heard
        finally:
            stream.close()


def _check_progress(heard: list[dict[str, Any]]) -> None:
    working = [p for p in heard if p["status"] == "working" and PROGRESS in p["_meta"]]
    steps = [(p.get("statusMessage"), json.dumps(p["_meta"][PROGRESS], sort_keys=True)) for p in working]
    changed = [step for n, step in enumerate(steps) if n == 0 or steps[n - 1] != step]
    assert len(changed) == len(steps), "every notification while working carries new progress"
    assert len({p for p in steps}) >= 10, [s[0] for s in steps]
    for params in working:
        progress = params["_meta"][PROGRESS]
        assert isinstance(progress["done"], int | float) and progress["done"] >= 0
        assert "total" not in progress or progress["total"] >= progress["done"]
        assert len(params["statusMessage"]) <= 200
    final = heard[-1]
    assert final["status"] == "completed", final.get("statusMessage")
    assert final["_meta"][PROGRESS]["done"] == final["_meta"][PROGRESS]["total"], "the run ended full"


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo corpus at its default size (what `serve` loads on a first start), static embedder."""
    data_dir = tmp_path_factory.mktemp("progress-demo")
    data_dir.chmod(0o700)
    assert load_demo_if_empty(AmlSettings(embedder="static"), data_dir)
    return data_dir


@pytest.mark.slow
def test_a_listen_stream_hears_run_full_eval_move_over_http(demo_dir: Path, issuer: TestIssuer) -> None:
    aml = AmlSettings(embedder="static", reembed_in_background=False)
    tasks = TaskSettings(progress_interval_ms=INTERVAL_MS)
    with secured_server(demo_dir, None, issuer=issuer, aml=aml, tasks=tasks, real_socket=True) as server:  # type: ignore[arg-type]
        token = server.mint(tenant=BANK, subject="carol", client_id="lab", scope="aml:eval")
        with httpx.Client(base_url=server.url, timeout=httpx.Timeout(10, read=60)) as http:
            created = create(http, "run_full_eval", {}, token=token)
            heard = _follow(http, created["taskId"], token, timeout=60)
            _check_progress(heard)
            polled = get(http, created["taskId"], token=token)
            assert polled["_meta"][PROGRESS] == heard[-1]["_meta"][PROGRESS]


CLUSTER_ENV = {
    "AML_MCP_AML__EMBEDDER": "static",
    "AML_MCP_AML__REEMBED_IN_BACKGROUND": "false",
    "AML_MCP_TASKS__PROGRESS_INTERVAL_MS": str(INTERVAL_MS),
    "AML_MCP_TASKS__HEARTBEAT_MS": "300",
    "AML_MCP_TASKS__LEASE_MS": "3000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path, int]]:
    url = database_url()
    check_reachable(url)
    work = tmp_path_factory.mktemp("progress-cluster")
    with running_cluster(
        replicas=1, workers=1, database_url=url, catalog="aml", work_dir=work, env=CLUSTER_ENV
    ) as running:
        env = {
            **os.environ,
            **CLUSTER_ENV,
            "AML_MCP_DATABASE_URL": url,
            "AML_MCP_DATABASE_SCHEMA": running.schema,
        }
        [(replica_port, _)] = running.replicas
        yield running.url, env, work / "operator", replica_port


@pytest.mark.slow
@pytest.mark.scaleout
@pytest.mark.timeout(300)  # the cluster's start (the demo corpus loaded into PostgreSQL) counts too
def test_a_workers_progress_reaches_a_stream_held_on_the_api_replica(
    cluster: tuple[str, dict[str, str], Path, int],
) -> None:
    public_url, env, operator_dir, replica_port = cluster
    minted = subprocess.run(
        [
            sys.executable, "-m", "aml_mcp", "token", "--data-dir", str(operator_dir),
            "--public-url", public_url, "--subject", "carol", "--tenant", BANK,
            "--client", "lab", "--scope", "aml:eval",
        ],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()
    # Straight to the replica, not through the balancer: the stream is held there, and the replica
    # (`--role api`) runs no body, so whatever progress the stream hears came from the worker.
    with httpx.Client(
        base_url=f"http://127.0.0.1:{replica_port}", timeout=httpx.Timeout(10, read=120)
    ) as http:
        created = create(http, "run_full_eval", {}, token=token)
        heard = _follow(http, created["taskId"], token, timeout=120)
        _check_progress(heard)
        assert get(http, created["taskId"], token=token)["_meta"][PROGRESS] == heard[-1]["_meta"][PROGRESS]
