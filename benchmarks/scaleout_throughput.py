"""Scale-out throughput: creates/s and `tasks/get`/s with 1 and with 3 API replicas behind HAProxy on
one PostgreSQL, and the embedded SQLite single process, in the same run, as ratios.

    .venv/bin/python benchmarks/scaleout_throughput.py [--duration 5] [--connections 16]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

The three set-ups serve the conformance fixtures (authentication off), and the task is
`slow_compute` with `seconds: 0`:

- `sqlite`: one `aml-mcp conformance-server` on its data dir, requests straight to it;
- `pg x1`: `aml-mcp cluster`'s code with one API replica and one worker, requests through HAProxy;
- `pg x3`: the same with three API replicas.

Nothing is pinned: the replicas, the worker, HAProxy, PostgreSQL and this load generator share the
machine's cores, as a cluster on one host does. On the 2-core machine the replicas compete for the
same two cores, so the x3 / x1 ratio says what the balancer and the extra processes cost or gain
here, not what three hosts would do. Compare the rows of one run with each other only.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from aml_mcp.cli.cluster import running_cluster  # noqa: E402
from loadgen import RunResult, run_load, spawn_server  # noqa: E402
from tasks_http import workload_requests  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SETUPS = ("sqlite", "pg x1", "pg x3")
SERVER_ENV = {
    "AML_MCP_LOG_LEVEL": "warning",
    # One anonymous caller makes every task: the per-caller quota of unfinished tasks would refuse
    # creates whenever the worker falls behind, and refusals are not what is measured.
    "AML_MCP_TASKS__MAX_ACTIVE_PER_PRINCIPAL": "1000000",
    "AML_MCP_TASKS__MAX_ACTIVE_PER_TENANT": "1000000",
    # Nor may the per-principal create window (finished tasks count) cut the create runs short.
    "AML_MCP_TASKS__MAX_CREATED_PER_PRINCIPAL_PER_WINDOW": "1000000000",
}


@contextmanager
def sqlite_server(work: Path) -> Iterator[tuple[int, int]]:
    """(port, pid) of one conformance server on SQLite in `work` (the embedded default)."""
    os.environ.update(SERVER_ENV)
    try:
        proc, port = spawn_server(
            [sys.executable, "-m", "aml_mcp", "conformance-server", "--data-dir", str(work)], "sqlite"
        )
    finally:
        for name in SERVER_ENV:
            os.environ.pop(name, None)
    try:
        yield port, proc.pid
    finally:
        proc.terminate()
        proc.wait(20)


@contextmanager
def cluster(replicas: int, database_url: str, schema: str) -> Iterator[tuple[int, int]]:
    """(balancer port, HAProxy pid) of a cluster with `replicas` API replicas and one worker."""
    with running_cluster(
        replicas=replicas, workers=1, database_url=database_url, schema=schema, env=SERVER_ENV
    ) as running:
        port = int(running.url.removesuffix("/mcp").rsplit(":", 1)[1])
        yield port, running.haproxy.pid


def measure(port: int, pid: int, workload: str, connections: int, duration: float) -> RunResult:
    make, ok = workload_requests(port, workload)
    return asyncio.run(
        run_load("127.0.0.1", port, make, connections=connections, duration=duration, server_pid=pid, ok=ok)
    )


def answered(result: RunResult) -> float:
    """Successful answers per second (a refusal is fast and would flatter a set-up)."""
    return (result.requests - result.errors) / result.seconds


def row(label: str, result: RunResult) -> str:
    p50 = 1000 * statistics.median(result.latencies)
    return (
        f"{label:<16} {answered(result):8.0f} ok/s  p50 {p50:7.2f} ms"
        f"  p99 {1000 * result.percentile(0.99):7.2f} ms  errors {result.errors}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--database-url", default=os.environ.get("AML_MCP_TEST_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    for name in ("AML_MCP_DATABASE_URL", "AML_MCP_DATABASE_SCHEMA"):
        os.environ.pop(name, None)  # the SQLite server is the embedded default; the clusters set their own
    print(f"{os.cpu_count()} cores, nothing pinned; {args.duration:.0f} s per run, c={args.connections}")
    results: dict[tuple[str, str], RunResult] = {}
    schemas: list[str] = []
    work = Path(tempfile.mkdtemp(prefix="aml-scaleout-bench-"))
    try:
        for setup in SETUPS:
            if setup == "sqlite":
                context = sqlite_server(work)
            else:
                schemas.append(f"bench_{secrets.token_hex(6)}")
                context = cluster(int(setup[-1]), args.database_url, schemas[-1])
            with context as (port, pid):
                for workload in ("create", "get"):
                    result = measure(port, pid, workload, args.connections, args.duration)
                    results[(setup, workload)] = result
                    print(row(f"{workload} {setup}", result), flush=True)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # a name made here: a-z, 0-9, _
    for workload, label in (("create", "creates/s"), ("get", "tasks/get/s")):
        lite, one, three = (answered(results[(setup, workload)]) for setup in SETUPS)
        print(
            f"{label}: pg x3 / pg x1 = {three / one:.2f}x; pg x1 / sqlite = {one / lite:.2f}x;"
            f" pg x3 / sqlite = {three / lite:.2f}x"
        )


if __name__ == "__main__":
    main()
