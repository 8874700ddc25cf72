"""The cluster survives its database's faults: the acceptance run of the fault work.

A real cluster (`aml-mcp cluster`: HAProxy, 3 API replicas, 2 workers) on a PostgreSQL server of the
test's own. Each burst sends 300 task creates through the balancer from 8 callers, each create with
an idempotency key and retried on 502, 503 and dropped connections as a careful client does, while
the database has every connection terminated three times and is then stopped for 20 s and started
again. Meanwhile listen streams held directly on every replica follow the tasks (reconnecting when a
stream ends, as clients do) and every replica's `/readyz` is polled. After each burst:

- every create was acknowledged exactly once, and every acknowledged task is stored once (0 lost, 0
  duplicated) and ends `completed` (0 failed by a fault);
- every stream saw every task it followed reach its final state (0 missed);
- every 503 the callers met carried `Retry-After` and a JSON-RPC error body;
- every `/readyz` answered within 500 ms.

The figures (503 seconds after each event, time to recovery) are printed (`pytest -s`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.cluster import Cluster, running_cluster
from tests.support.mcp_http import WITH_TASKS, headers_for, message
from tests.support.private_postgres import PrivatePostgres

pytestmark = [pytest.mark.faults, pytest.mark.scaleout, pytest.mark.slow]

BURSTS = int(os.environ.get("AML_MCP_CHAOS_BURSTS", "5"))
CREATES, CALLERS = 300, 8
TASK_SECONDS = 2.0
STOP_SECONDS = 20.0
READY_WITHIN = 0.5
STREAM_BATCH = 25
"""Tasks per listen stream: streams open as creates are acknowledged, round robin over the replicas."""
TERMINAL = {"completed", "failed", "cancelled"}
ENV = {
    "AML_MCP_TASKS__LEASE_MS": "3000",
    "AML_MCP_TASKS__HEARTBEAT_MS": "300",
    "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "500",
    # Authentication is off on the conformance server, so every create is one principal's.
    "AML_MCP_TASKS__MAX_CREATED_PER_PRINCIPAL_PER_WINDOW": "100000",
    "AML_MCP_TASKS__MAX_ACTIVE_PER_PRINCIPAL": "100000",
    "AML_MCP_TASKS__MAX_ACTIVE_PER_TENANT": "100000",
}


@dataclass
class Answers:
    """What the callers met: every refusal, and the moments creates succeeded."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    refusals: list[tuple[float, str]] = field(default_factory=list)
    """(when, what): a 5xx or a dropped connection."""
    malformed_503: list[str] = field(default_factory=list)
    successes: list[float] = field(default_factory=list)
    acknowledged: dict[int, str] = field(default_factory=dict)
    """Create index -> the task id it was acknowledged with (the last answer)."""
    ids_by_index: dict[int, set[str]] = field(default_factory=dict)
    """Every task id any attempt of a create was answered with: one each, or a key failed."""

    def refused(self, what: str) -> None:
        with self.lock:
            self.refusals.append((time.monotonic(), what))


def create_until_acknowledged(http: httpx.Client, index: int, key: str, answers: Answers) -> None:
    params = {"name": "slow_compute", "arguments": {"seconds": TASK_SECONDS, "label": key}}
    body = message("tools/call", params, capabilities=WITH_TASKS, **{"aml-mcp/idempotencyKey": key})
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            answer = http.post("/mcp", content=json.dumps(body), headers=headers_for(body))
        except httpx.TransportError as error:
            answers.refused(f"connection: {type(error).__name__}")
            time.sleep(0.2)
            continue
        if answer.status_code == 200:
            result = answer.json().get("result") or {}
            if result.get("resultType") == "task":
                with answers.lock:
                    answers.successes.append(time.monotonic())
                    answers.acknowledged[index] = result["taskId"]
                    answers.ids_by_index.setdefault(index, set()).add(result["taskId"])
                return
            raise AssertionError(f"create {index} answered {answer.text[:300]}")
        answers.refused(f"HTTP {answer.status_code}")
        if answer.status_code == 503:
            if not _well_formed_503(answer):
                with answers.lock:
                    answers.malformed_503.append(f"{answer.headers.get('content-type')}: {answer.text[:200]}")
            time.sleep(min(2.0, float(answer.headers.get("retry-after", "1"))) * random.uniform(0.5, 1.0))
        elif answer.status_code == 502:
            time.sleep(0.2)
        else:
            raise AssertionError(f"create {index} answered HTTP {answer.status_code}: {answer.text[:300]}")
    raise AssertionError(f"create {index} was never acknowledged")


def _well_formed_503(answer: httpx.Response) -> bool:
    if "retry-after" not in answer.headers:
        return False
    try:
        body = answer.json()
    except ValueError:
        return False
    return body.get("jsonrpc") == "2.0" and isinstance(body.get("error"), dict)


def follow(url: str, task_ids: list[str], seen: dict[str, str], stop: threading.Event) -> None:
    """A listen stream on one replica following `task_ids`, reconnected whenever it ends, until
    every task's final state arrived (or `stop`)."""
    body = message("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, capabilities=WITH_TASKS)
    with httpx.Client(base_url=url, timeout=httpx.Timeout(5, read=30)) as http:
        while not stop.is_set() and not all(seen.get(t) in TERMINAL for t in task_ids):
            try:
                with http.stream(
                    "POST", "/mcp", content=json.dumps(body), headers=headers_for(body)
                ) as stream:
                    if stream.status_code != 200:
                        stream.read()
                        time.sleep(0.5)
                        continue
                    for line in stream.iter_lines():
                        if stop.is_set():
                            return
                        if not line.startswith("data:"):
                            continue
                        note = json.loads(line[5:].strip())
                        if note.get("method") == "notifications/tasks":
                            seen[note["params"]["taskId"]] = note["params"]["status"]
                        if all(seen.get(t) in TERMINAL for t in task_ids):
                            return
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.5)


def poll_readiness(urls: list[str], slow: list[tuple[str, float]], stop: threading.Event) -> int:
    polled = 0
    with httpx.Client(timeout=5) as http:
        while not stop.is_set():
            for url in urls:
                started = time.monotonic()
                with contextlib.suppress(httpx.HTTPError):
                    http.get(f"{url}/readyz")
                took = time.monotonic() - started
                polled += 1
                if took > READY_WITHIN:
                    slow.append((url, took))
            stop.wait(0.25)
    return polled


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, PrivatePostgres]]:
    work: Path = tmp_path_factory.mktemp("chaos")
    with (
        PrivatePostgres() as pg,
        running_cluster(
            replicas=3, workers=2, database_url=pg.url, catalog="conformance", work_dir=work, env=ENV
        ) as running,
    ):
        yield running, pg


@pytest.mark.parametrize("burst", range(BURSTS))
def test_a_burst_through_resets_and_a_stop_loses_nothing(
    cluster: tuple[Cluster, PrivatePostgres], burst: int
) -> None:
    running, pg = cluster
    base = running.url.removesuffix("/mcp")
    replicas = [f"http://127.0.0.1:{port}" for port, _ in running.replicas]
    answers, run = Answers(), f"chaos{burst}-{os.getpid()}"
    stop, slow_ready = threading.Event(), []
    seen_by_stream: list[tuple[list[str], dict[str, str]]] = []
    streams: list[threading.Thread] = []
    events: list[tuple[str, float]] = []

    def open_streams() -> None:  # as creates are acknowledged, streams on every replica follow them
        followed = 0
        while not stop.is_set():
            with answers.lock:
                # In the order acknowledged (a dict keeps it): ordered by create index instead, an
                # index retried past a later one would land among ids already followed, and be missed.
                ids = list(answers.acknowledged.values())
            while len(ids) - followed >= STREAM_BATCH or (len(ids) == CREATES and followed < CREATES):
                batch, seen = ids[followed : followed + STREAM_BATCH], {}
                url = replicas[len(seen_by_stream) % len(replicas)]
                seen_by_stream.append((batch, seen))
                reader = threading.Thread(target=follow, args=(url, batch, seen, stop), daemon=True)
                reader.start()
                streams.append(reader)
                followed += len(batch)
            if followed >= CREATES:
                return
            time.sleep(0.1)

    def faults() -> None:  # three resets spread over the burst, then a stop and a start
        for share in (0.2, 0.45, 0.7):
            while len(answers.acknowledged) < CREATES * share and not stop.is_set():
                time.sleep(0.05)
            events.append(("terminate", time.monotonic()))
            pg.terminate_all()
        while len(answers.acknowledged) < CREATES * 0.85 and not stop.is_set():
            time.sleep(0.05)
        events.append(("stop", time.monotonic()))
        pg.stop()
        time.sleep(STOP_SECONDS)
        pg.start()
        events.append(("start", time.monotonic()))

    readiness = threading.Thread(target=poll_readiness, args=(replicas, slow_ready, stop), daemon=True)
    readiness.start()
    opener, breaker = threading.Thread(target=open_streams, daemon=True), threading.Thread(target=faults)
    opener.start()
    breaker.start()
    indices = iter(range(CREATES))
    take = threading.Lock()

    def caller() -> None:
        with httpx.Client(base_url=base, timeout=httpx.Timeout(10, read=30)) as http:
            while True:
                with take:
                    index = next(indices, None)
                if index is None:
                    return
                create_until_acknowledged(http, index, f"{run}-{index}", answers)

    callers = [threading.Thread(target=caller) for _ in range(CALLERS)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    breaker.join()
    opener.join(60)
    deadline = time.monotonic() + 120
    for reader in streams:
        reader.join(max(0.1, deadline - time.monotonic()))
    stop.set()
    readiness.join(5)

    with pg.connect() as conn:
        rows = conn.execute(
            f"SELECT task_id, status FROM {running.schema}.tasks WHERE idempotency_key LIKE %s",  # noqa: S608
            (f"{run}-%",),
        ).fetchall()
    statuses = {task_id: status for task_id, status in rows}
    acknowledged = set(answers.acknowledged.values())
    _report(burst, events, answers, slow_ready, statuses)
    assert len(answers.acknowledged) == CREATES
    assert all(len(ids) == 1 for ids in answers.ids_by_index.values()), "a retried key named two tasks"
    assert len(acknowledged) == CREATES, "two creates were acknowledged with one task"
    assert sorted(t for batch, _ in seen_by_stream for t in batch) == sorted(acknowledged), (
        "every acknowledged task is followed by exactly one stream"
    )
    assert set(statuses) == acknowledged, "tasks lost, or stored without being acknowledged"
    unfinished = {t[:8]: s for t, s in statuses.items() if s != "completed"}
    assert unfinished == {}, "tasks not completed (failed by a fault?)"
    missed = [t for batch, seen in seen_by_stream for t in batch if seen.get(t) != "completed"]
    assert missed == [], f"{len(missed)} final states missed on streams"
    assert answers.malformed_503 == [], answers.malformed_503[:5]
    assert slow_ready == [], f"/readyz slower than {READY_WITHIN * 1000:.0f} ms: {slow_ready[:5]}"


def _report(
    burst: int,
    events: list[tuple[str, float]],
    answers: Answers,
    slow_ready: list[tuple[str, float]],
    statuses: dict[str, str],
) -> None:
    """503 seconds after each event (first to last refusal before the next event) and recovery (the
    first acknowledged create after it)."""
    lines = [f"burst {burst}: {len(statuses)} tasks stored, {len(answers.refusals)} refused answers"]
    marks = [*events, ("end", float("inf"))]
    for (name, at), (_, until) in itertools.pairwise(marks):
        refused = [when for when, _ in answers.refusals if at <= when < until]
        recovered = next((when for when in sorted(answers.successes) if when >= at), None)
        span = (max(refused) - at) if refused else 0.0
        to_recover = f"{recovered - at:.2f} s" if recovered is not None else "-"
        lines.append(f"  {name}: {len(refused)} refused over {span:.2f} s; first success after {to_recover}")
    lines.append(f"  readiness answers over 500 ms: {len(slow_ready)}")
    print("\n".join(lines))
