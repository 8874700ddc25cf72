"""The operational endpoints through the balancer (review findings N3 and N4): a real `aml-mcp cluster`
(HAProxy, two API replicas, a worker, one PostgreSQL schema) serving the AML tools while the demo
banks are re-embedded with the transformer in the background.

- `/metrics` is not served on the balancer's port (HAProxy used to pass it to a replica, which saw
  a loopback peer and answered), nor on any replica's public port; each replica and worker serves
  it on a loopback listener of its own, which the cluster prints.
- Anonymous `/readyz` through the balancer says `{"status": "ready"}` and nothing else while the
  banks are being moved: no bank name, no note count. Which bank moves is in the replicas' logs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.cli.cluster import Cluster, running_cluster
from tests.support.postgres import check_reachable, database_url

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

NOTES_PER_BANK = 300
"""Three banks of these keep the transformer busy for tens of seconds on 2 cores: the cluster is up
and probed while the move still runs."""
ENV = {
    "AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(NOTES_PER_BANK),
    "AML_MCP_AML__EMBEDDER": "minilm",
    "AML_MCP_AML__REEMBED_IN_BACKGROUND": "true",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    url = database_url()
    check_reachable(url)
    with running_cluster(
        replicas=2, workers=1, database_url=url, catalog="aml", work_dir=tmp_path, env=ENV
    ) as running:
        yield running


def _metric(text: str, name: str) -> float:
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(f"{name} ")]
    assert len(values) == 1, (name, text[:2000])
    return values[0]


def _banks_left(cluster: Cluster, client: httpx.Client) -> float:
    """The most banks any process still reports moving, from every metrics listener."""
    return max(
        _metric(client.get(url).text, "aml_mcp_reembedding_banks_left") for _, url in cluster.metrics_urls()
    )


def test_metrics_stay_off_the_balancer_and_readyz_names_no_bank(cluster: Cluster, tmp_path: Path) -> None:
    balancer = cluster.url.removesuffix("/mcp")
    with httpx.Client(timeout=10) as client:
        # Not through the balancer, however the path is spelled, nor on a replica's public port.
        for path in ("/metrics", "/metrics/", "/metrics?name[]=aml_mcp_tasks", "/%6Detrics"):
            refused = client.get(f"{balancer}{path}")
            assert refused.status_code == 404, (path, refused.status_code)
            assert "aml_mcp_" not in refused.text, path
        for port, _ in cluster.replicas:
            assert client.get(f"http://127.0.0.1:{port}/metrics").status_code == 404
        # Each replica and worker serves them on its own loopback listener.
        listeners = cluster.metrics_urls()
        assert [name for name, _ in listeners] == ["replica 1", "replica 2", "worker 1"]
        for name, url in listeners:
            scraped = client.get(url)
            assert scraped.status_code == 200, name
            assert _metric(scraped.text, "aml_mcp_ready") == 1, name

        answers: list[str] = []
        while_moving = 0
        deadline = time.monotonic() + 300
        while (left := _banks_left(cluster, client)) > 0:
            assert time.monotonic() < deadline, "the background move did not end"
            answer = client.get(f"{balancer}/readyz")
            assert answer.status_code == 200, answer.text
            answers.append(answer.text)
            if _banks_left(cluster, client) > 0:
                while_moving += 1  # the move ran before and after this answer
            assert left > 0
            time.sleep(0.3)
        answers.append(client.get(f"{balancer}/readyz").text)
    assert while_moving >= 2, "no /readyz answer through the balancer fell inside the move"
    for text in answers:
        assert json.loads(text) == {"status": "ready"}, text
        assert not [tenant.name for tenant in TENANTS if tenant.name in text]
        assert not any(ch.isdigit() for ch in text), text
    # The details went to the log of whichever process moved each bank.
    logs = "".join(path.read_text() for path in tmp_path.glob("*.log"))
    for tenant in TENANTS:
        assert f"({tenant.name}): {NOTES_PER_BANK}/{NOTES_PER_BANK} notes" in logs, tenant.name
