"""The default cluster (`aml-mcp cluster`: HAProxy, 3 API replicas, 2 workers, the AML tools) on a
PostgreSQL server of the test's own, with the default pool sizes:

- it holds at most 50 connections (and no more than the budget it prints), at rest and under a
  short bounded load of searches, creates and reads from 8 callers through the balancer;
- the same idempotency key sent to each replica, then through the balancer, creates one task.

Counting on a private server means every `aml-mcp%` connection counted is this cluster's.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.cli.cluster import Cluster, budget_line, pool_size, running_cluster
from aml_mcp.persistence import ConnectionBudget
from aml_mcp.protocol.idempotency import IDEMPOTENCY_KEY_META
from tests.cli.test_cluster_isolation import AML_ENV
from tests.support.aml_live import complete_case, demo_cases_by_bank
from tests.support.mcp_http import WITH_TASKS, message, post
from tests.support.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.scaleout, pytest.mark.faults, pytest.mark.slow]

REPLICAS, WORKERS = 3, 2
MOST = 50
LOAD_SECONDS = 20.0
CALLERS = 8
BANKS = ("meridian-bank", "harbour-trust")


@dataclass
class Running:
    cluster: Cluster
    pg: PrivatePostgres
    env: dict[str, str]
    operator: Path

    def mint(self, bank: str, analyst: str) -> str:
        minted = subprocess.run(
            [
                sys.executable, "-m", "aml_mcp", "token", "--data-dir", str(self.operator),
                "--public-url", self.cluster.url, "--subject", analyst, "--tenant", bank,
                "--client", "budget-test", "--scope", "aml:read aml:eval aml:draft",
            ],
            env=self.env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert minted.returncode == 0, minted.stderr
        return minted.stdout.strip()

    def connections(self) -> int:
        return len(self.pg.connections())

    def tasks(self) -> int:
        with self.pg.connect() as conn:
            row = conn.execute(f"SELECT COUNT(*) FROM {self.cluster.schema}.tasks").fetchone()  # noqa: S608
        return int(row[0]) if row else 0


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    work = tmp_path_factory.mktemp("budget-cluster")
    env = {key: value for key, value in AML_ENV.items() if not key.startswith("AML_MCP_TASKS__")}
    assert "AML_MCP_DATABASE_POOL_SIZE" not in os.environ, "the default cluster's pools, please"
    with (
        PrivatePostgres() as pg,
        running_cluster(
            replicas=REPLICAS, workers=WORKERS, database_url=pg.url, catalog="aml", work_dir=work, env=env
        ) as cluster,
    ):
        child_env = {
            **os.environ,
            **env,
            "AML_MCP_DATABASE_URL": pg.url,
            "AML_MCP_DATABASE_SCHEMA": cluster.schema,
        }
        yield Running(cluster, pg, child_env, work / "operator")


def call(name: str, arguments: dict[str, Any], **meta: Any) -> dict[str, Any]:
    return message("tools/call", {"name": name, "arguments": arguments}, capabilities=WITH_TASKS, **meta)


def test_the_default_cluster_holds_at_most_50_connections_at_rest_and_under_load(running: Running) -> None:
    size = pool_size({})  # the default: nothing in the cluster's environment sets it
    replica = ConnectionBudget.of(size, serves_requests=True)
    worker = ConnectionBudget.of(size, serves_requests=False)
    printed = REPLICAS * replica.total + WORKERS * worker.total
    assert f"connection budget: {printed} =" in budget_line(REPLICAS, WORKERS, {})
    assert printed <= MOST
    at_rest = [running.connections() for _ in range(3)]
    tokens = [running.mint(BANKS[n % 2], f"analyst-{n}") for n in range(CALLERS)]
    cases = demo_cases_by_bank()
    case_ids = {bank: sorted(cases[bank]) for bank in BANKS}
    samples: list[int] = []
    answers: dict[str, int] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append(running.connections())
            time.sleep(0.25)

    def caller(number: int) -> None:
        token, bank = tokens[number], BANKS[number % 2]
        with httpx.Client(base_url=running.cluster.url.removesuffix("/mcp"), timeout=30) as http:
            sent = 0
            while not stop.is_set():
                sent += 1
                if sent % 2 == 0:  # a different case each time: no two runs coalesce into one
                    case = case_ids[bank][(sent * CALLERS + number) % len(case_ids[bank])]
                    body = call("draft_sar_batch", {"case_ids": [case]})
                else:
                    body = call("search_aml_notes", {"query": "structuring cash deposits", "top_k": 5})
                response = post(http, body, token=token)
                outcome = f"{response.status_code}/{response.json().get('error', {}).get('code', 'ok')}"
                answers[outcome] = answers.get(outcome, 0) + 1
                time.sleep(0.02)

    threads = [threading.Thread(target=sample)] + [
        threading.Thread(target=caller, args=(n,)) for n in range(CALLERS)
    ]
    for thread in threads:
        thread.start()
    time.sleep(LOAD_SECONDS)
    stop.set()
    for thread in threads:
        thread.join(60)
    most = max(samples)
    print(f"\nconnections at rest {at_rest}, under load max {most} (budget {printed}); answers {answers}")
    assert max(at_rest) <= MOST
    assert max(samples) <= min(MOST, printed), samples
    assert answers.get("200/ok", 0) > 50, answers  # the load did run


def test_the_same_key_sent_to_every_replica_creates_one_task(running: Running) -> None:
    token = running.mint(BANKS[0], "retrying-analyst")
    case = complete_case(demo_cases_by_bank()[BANKS[0]])
    key = {IDEMPOTENCY_KEY_META: f"budget-{secrets.token_hex(8)}"}
    before = running.tasks()
    urls = [f"http://127.0.0.1:{port}" for port, _ in running.cluster.replicas]
    urls.append(running.cluster.url.removesuffix("/mcp"))  # and once through the balancer
    ids = []
    for url in urls:
        with httpx.Client(base_url=url, timeout=30) as http:
            response = post(http, call("draft_sar_batch", {"case_ids": [case]}, **key), token=token)
        assert response.status_code == 200, response.text
        ids.append(response.json()["result"]["taskId"])
    assert len(set(ids)) == 1, ids
    assert running.tasks() == before + 1
