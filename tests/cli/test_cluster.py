"""Scale-out acceptance: HAProxy round-robin over API replicas (`--role api`) and workers sharing
one PostgreSQL schema, all real processes started by `aml-mcp cluster`'s own code.

- The official conformance suite passes through the balancer, every request landing on whichever
  replica is next, and every task body running on a worker.
- kill -9 of a replica and of a worker during a burst of 500 creates: every task a client got a
  `CreateTaskResult` for is readable from every surviving replica and ends `completed` with its own
  result, the same on every replica.
- A listen stream on a killed replica reconnects through the balancer and gets current state first;
  terminating every process's LISTEN connection during a burst of completions loses none of them
  on any replica's stream.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.cluster import Cluster, haproxy_config, running_cluster
from tests.subscriptions.test_listen_http import listening
from tests.support.mcp_http import WITH_TASKS, create, get
from tests.support.postgres import check_reachable, database_url, kill_listeners
from tests.support.sse import final_states
from tests.support.waiting import eventually

pytestmark = [pytest.mark.scaleout, pytest.mark.slow]

SUITE = Path(os.environ.get("AML_MCP_CONFORMANCE_SUITE", "/work/shared/conformance/run-server-suite.sh"))
FAST_LEASES = {
    "AML_MCP_TASKS__LEASE_MS": "3000",
    "AML_MCP_TASKS__HEARTBEAT_MS": "500",
    "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "1000",
    # The conformance server has authentication off, so the bursts below are one principal's: the
    # per-principal create window (a guard against one caller flooding the store) would refuse them.
    "AML_MCP_TASKS__MAX_CREATED_PER_PRINCIPAL_PER_WINDOW": "100000",
}
"""Short leases so a killed worker's tasks are taken over within seconds (the claim poll stays a
backstop: new tasks wake workers by NOTIFY)."""
TERMINAL = ("completed", "failed", "cancelled")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    url = database_url()
    check_reachable(url)
    with running_cluster(
        replicas=3, workers=2, database_url=url, catalog="conformance", work_dir=tmp_path, env=FAST_LEASES
    ) as running:
        yield running


def test_the_template_renders_one_server_per_replica_with_health_checks() -> None:
    template = (Path(__file__).resolve().parents[2] / "deploy" / "haproxy.cfg.template").read_text()
    config = haproxy_config(template, port=8080, replicas=[9001, 9002])
    assert "bind 127.0.0.1:8080" in config
    assert "server r1 127.0.0.1:9001" in config and "server r2 127.0.0.1:9002" in config
    for line in ("balance roundrobin", "option http-no-delay", "retry-on conn-failure", "uri /readyz"):
        assert line in config
    assert "http-request deny deny_status 404 if { path_beg /metrics }" in config


def test_the_conformance_suite_passes_through_the_balancer(cluster: Cluster) -> None:
    completed = subprocess.run(
        ["bash", str(SUITE), cluster.url], capture_output=True, text=True, timeout=600, check=False
    )
    summary = [line for line in completed.stdout.splitlines() if line.startswith("conformance:")]
    failed = [line for line in completed.stdout.splitlines() if line.startswith("FAIL")]
    assert summary == ["conformance: 50 passed, 0 failed"], (failed, completed.stderr[-2000:])


BURST = 500
"""Creates in the kill burst: a replica dies after the first 150, a worker after 300."""


def test_tasks_survive_kill_9_of_a_replica_and_a_worker_during_a_burst(cluster: Cluster) -> None:
    created: dict[str, str] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def burst(prefix: str) -> None:
        with httpx.Client(base_url=cluster.url.removesuffix("/mcp"), timeout=10) as client:
            n = 0
            while not stop.is_set():
                label = f"{prefix}-{n}"
                n += 1
                try:
                    task = create(client, "slow_compute", {"seconds": 0.2, "label": label})
                except (httpx.HTTPError, AssertionError, KeyError):
                    continue  # no CreateTaskResult: the client was not told a task exists
                with lock:
                    created[task["taskId"]] = label
                    if len(created) >= BURST:
                        stop.set()

    threads = [threading.Thread(target=burst, args=(f"c{i}",)) for i in range(4)]
    for thread in threads:
        thread.start()
    try:
        eventually(lambda: len(created) >= 150, timeout=120, what="the first creates")
        _, victim = cluster.replicas[0]
        victim.send_signal(signal.SIGKILL)
        eventually(lambda: len(created) >= 300, timeout=120, what="creates after the replica's death")
        cluster.workers[0].send_signal(signal.SIGKILL)
        eventually(lambda: stop.is_set(), timeout=180, what=f"{BURST} creates")
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
    assert len(created) >= BURST

    survivors = [port for port, proc in cluster.replicas if proc.poll() is None]
    assert len(survivors) == 2
    seen: dict[str, dict[str, object]] = {}
    for port in survivors:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as client:
            for task_id, label in created.items():
                state = eventually(
                    lambda task_id=task_id: get(client, task_id),
                    until=lambda state: state["status"] in TERMINAL,
                    timeout=120,
                    interval=0.1,
                    what=f"task {task_id[:8]} to end",
                )
                assert state["status"] == "completed", state
                assert state["result"]["content"][0]["text"] == label, state
                # One terminal result: every replica, every read, the same state and the same result.
                assert seen.setdefault(task_id, state) == state, (task_id, seen[task_id], state)
        # Every replica reads the shared store for /metrics: each counts every task.
        with httpx.Client(timeout=10) as client:
            text = client.get(f"http://127.0.0.1:{cluster.replica_metrics[port]}/metrics").text
        completed = [
            line for line in text.splitlines() if line.startswith('aml_mcp_tasks{status="completed"}')
        ]
        assert completed and float(completed[0].split()[-1]) >= len(created), completed


def _open_streams(cluster: Cluster, port: int) -> float:
    """Open listen streams on the replica serving `port`, from its metrics listener."""
    with httpx.Client(timeout=5) as client:
        text = client.get(f"http://127.0.0.1:{cluster.replica_metrics[port]}/metrics").text
    lines = [line for line in text.splitlines() if line.startswith("aml_mcp_listen_streams_open ")]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_a_listen_stream_on_a_killed_replica_reconnects_and_gets_current_state_first(
    cluster: Cluster,
) -> None:
    base = cluster.url.removesuffix("/mcp")
    with httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=30)) as client:
        task_id = create(client, "slow_compute", {"seconds": 6, "label": "survivor"})["taskId"]
        with listening(client, {"taskIds": [task_id]}, capabilities=WITH_TASKS) as stream:
            assert stream.next() is not None  # the acknowledgement
            first = stream.next(timeout=10)
            assert first is not None and first["params"]["status"] == "working"
            holders = [
                (port, proc)
                for port, proc in cluster.replicas
                if _open_streams(cluster, port) == 1  # found by /metrics
            ]
            assert len(holders) == 1, holders
            holders[0][1].send_signal(signal.SIGKILL)
            with contextlib.suppress(httpx.HTTPError):  # the stream ends with its replica
                assert stream.next(timeout=15) is None
        # Reconnect through the balancer: the dead replica is skipped, the current state comes first.
        with listening(client, {"taskIds": [task_id]}, capabilities=WITH_TASKS) as again:
            assert again.next() is not None
            current = again.next(timeout=10)
            assert current is not None and current["method"] == "notifications/tasks"
            assert current["params"]["taskId"] == task_id
            assert current["params"]["status"] in ("working", "completed")
            while current["params"]["status"] != "completed":
                current = again.next(timeout=20)
                assert current is not None
            assert current["params"]["taskId"] == task_id


def test_killing_every_listener_during_a_burst_of_completions_loses_nothing_on_any_stream(
    cluster: Cluster,
) -> None:
    """A stream on each replica follows the same 40 tasks; while the worker completes them, every
    process's LISTEN connection is terminated six times. Each stream still ends with every task
    completed: after a reconnect each replica re-reads its streams' tasks."""
    base = cluster.url.removesuffix("/mcp")
    seconds = [0.3 + 0.05 * i for i in range(40)]  # completions spread over about 2 seconds
    with httpx.Client(base_url=base, timeout=10) as client:
        task_ids = [
            create(client, "slow_compute", {"seconds": s, "label": str(s)})["taskId"] for s in seconds
        ]
    outcomes: dict[int, dict[str, str]] = {}
    opened = threading.Barrier(len(cluster.replicas) + 1, timeout=30)

    def follow(port: int) -> None:
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=httpx.Timeout(10, read=40)) as client,
            listening(client, {"taskIds": task_ids}, capabilities=WITH_TASKS) as stream,
        ):
            ack = stream.next()
            assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
            opened.wait()
            outcomes[port] = final_states(stream, task_ids, timeout=40)

    followers = [threading.Thread(target=follow, args=(port,)) for port, _ in cluster.replicas]
    for follower in followers:
        follower.start()
    opened.wait()
    killed: list[int] = []
    kill_listeners(database_url(), cluster.schema, 6, 0.35, killed)
    for follower in followers:
        follower.join(60)
    # Three replicas and two workers each hold one listener connection.
    assert sum(1 for count in killed if count >= 4) >= 3, f"listeners were not killed: {killed}"
    assert sorted(outcomes) == sorted(port for port, _ in cluster.replicas)
    for port, states in outcomes.items():
        assert {t: states.get(t) for t in task_ids} == dict.fromkeys(task_ids, "completed"), port
