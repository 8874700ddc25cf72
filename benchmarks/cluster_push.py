"""Cross-replica push latency on a local cluster: a worker finishes a task, and how long until
`notifications/tasks` with the final state arrives on a listen stream held by an API replica other
than the one that created the task (HAProxy in front, but both requests go straight to their
replica so the two are different).

Latency = arrival on the stream (wall clock) - the task's `lastUpdatedAt` (the database's clock, on
this same machine). Run: `.venv/bin/python -m benchmarks.cluster_push [N]` (PostgreSQL from
AML_MCP_TEST_DATABASE_URL, else the local test server; a schema of its own, dropped at the end).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from datetime import datetime

import httpx
from tests.support.mcp_http import WITH_TASKS, create, headers_for, message
from tests.support.sse import SseReader

from aml_mcp.cli.cluster import running_cluster


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def measure(count: int) -> list[float]:
    url = os.environ.get("AML_MCP_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
    latencies: list[float] = []
    with running_cluster(replicas=2, workers=1, database_url=url, catalog="conformance") as cluster:
        (port_a, _), (port_b, _) = cluster.replicas[:2]
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{port_a}", timeout=10) as a,
            httpx.Client(base_url=f"http://127.0.0.1:{port_b}", timeout=httpx.Timeout(10, read=30)) as b,
        ):
            for _ in range(count):
                task_id = create(a, "slow_compute", {"seconds": 0.2})["taskId"]
                body = message(
                    "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, capabilities=WITH_TASKS
                )
                with b.stream(
                    "POST", "/mcp", content=json.dumps(body), headers=headers_for(body)
                ) as response:
                    stream = SseReader(response)
                    stream.next()
                    while True:
                        note = stream.next(timeout=20)
                        assert note is not None
                        if note.get("method") != "notifications/tasks":
                            print(note, file=sys.stderr)
                            continue
                        if note["params"]["status"] == "completed":
                            latencies.append(time.time() - _epoch(note["params"]["lastUpdatedAt"]))
                            stream.close()  # hang up, so the replica frees the stream's slot at once
                            break
    return latencies


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    latencies = sorted(measure(count))
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(f"cross-replica push latency over {len(latencies)} tasks: p50 {p50:.1f} ms, p99 {p99:.1f} ms")


if __name__ == "__main__":
    main()
