"""Tasks on PostgreSQL against SQLite, in the same run, and cross-process push latency.

    .venv/bin/python benchmarks/pg_tasks.py [--duration 5] [--connections 16] [--tasks 100]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

1. `creates/s` and `tasks/get/s` over real HTTP on loopback: the real aml-mcp app (conformance
   fixtures, authentication off, `slow_compute` with `seconds: 0`) under uvicorn in its own process
   pinned to one core, the load generator on the other; once on SQLite (the data dir), once on
   PostgreSQL (`database_url`, a schema of its own). Prints each, then PostgreSQL / SQLite ratios.
2. Cross-process push: two server processes on one PostgreSQL schema. A runs `--tasks` tasks
   (staggered to end over about a second); B holds a listen stream following all of them. The figure is the
   delay from the task's completion in A (its `lastUpdatedAt`, stamped at the commit from the
   database's clock) to the `notifications/tasks` arriving at the client of B, p50/p99.

The PostgreSQL server is the one the tests use; the schema is dropped at the end. On a shared
2-core machine, compare the rows of one run with each other, not with another machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent))
from listen_latency import Connection, open_stream, parse_iso, sse_messages, summary
from loadgen import RunResult, spawn_server, split_cores
from tasks_http import measure

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def with_env(env: dict[str, str]) -> None:
    """Set (or, for empty values, remove) variables the server processes inherit."""
    for key, value in env.items():
        if value:
            os.environ[key] = value
        else:
            os.environ.pop(key, None)


def throughput(url: str, schema: str, duration: float, connections: int, cpu: int) -> None:
    results: dict[tuple[str, str], RunResult] = {}
    for backend in ("sqlite", "postgres"):
        shared = backend == "postgres"
        with_env(
            {
                "AML_MCP_DATABASE_URL": url if shared else "",
                "AML_MCP_DATABASE_SCHEMA": schema if shared else "",
            }
        )
        for workload in ("create", "get"):
            result = measure("aml", workload, connections, duration, cpu)
            results[(backend, workload)] = result
            print(result.row(f"{workload} {backend} (c={connections})"), flush=True)
    with_env({"AML_MCP_DATABASE_URL": "", "AML_MCP_DATABASE_SCHEMA": ""})
    for workload, label in (("create", "creates/s"), ("get", "tasks/get/s")):
        pg, lite = results[("postgres", workload)], results[("sqlite", workload)]
        print(
            f"{label}: PostgreSQL {pg.throughput:.0f} vs SQLite {lite.throughput:.0f}"
            f" = {pg.throughput / lite.throughput:.2f}x; p50 latency"
            f" {pg.percentile(0.5) / lite.percentile(0.5):.2f}x of SQLite's"
        )


async def push_latency(port_a: int, port_b: int, tasks: int) -> list[float]:
    connection = Connection(port_a)
    created = []
    for i in range(tasks):
        result = await connection.call(
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 2.0 + 0.01 * i}},
            name="slow_compute",
        )
        created.append(str(result["taskId"]))
    return await follow_all(port_b, created)


async def follow_all(port: int, task_ids: list[str]) -> list[float]:
    """One stream following every task (a caller may hold only a few streams): each task's delay."""
    reader = await open_stream(port, {"taskIds": task_ids}, "bench")
    delays: dict[str, float] = {}
    async for arrived, message in sse_messages(reader):
        params = message.get("params", {})
        if message.get("method") == "notifications/tasks" and params.get("status") == "completed":
            delays.setdefault(params["taskId"], arrived - parse_iso(params["lastUpdatedAt"]))
            if len(delays) == len(task_ids):
                break
    reader._aml_writer.close()  # type: ignore[attr-defined]
    return list(delays.values())


def cross_process(url: str, schema: str, tasks: int) -> None:
    with_env({"AML_MCP_DATABASE_URL": url, "AML_MCP_DATABASE_SCHEMA": schema})
    servers: list[subprocess.Popen[bytes]] = []
    try:
        command = [sys.executable, str(Path(__file__).resolve().parent / "tasks_http.py"), "--serve", "aml"]
        proc_a, port_a = spawn_server([*command, "--cpu", "1"], "A")
        servers.append(proc_a)
        proc_b, port_b = spawn_server([*command, "--cpu", "0"], "B")
        servers.append(proc_b)
        delays = asyncio.run(push_latency(port_a, port_b, tasks))
        print(summary(f"push A -> B across processes, {tasks} tasks", delays))
    finally:
        with_env({"AML_MCP_DATABASE_URL": "", "AML_MCP_DATABASE_SCHEMA": ""})
        for proc in servers:
            proc.terminate()
            proc.wait(20)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--tasks", type=int, default=100, help="tasks followed (at most 100: one stream)")
    parser.add_argument("--database-url", default=os.environ.get("AML_MCP_TEST_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    schema = f"bench_{secrets.token_hex(6)}"
    server_cpu, client_cpu = split_cores()
    print(f"cores: server on {server_cpu}, load generator on {client_cpu}; {args.duration:.0f} s per run")
    try:
        throughput(args.database_url, schema, args.duration, args.connections, server_cpu)
        cross_process(args.database_url, schema, min(args.tasks, 100))
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # a name made here: a-z, 0-9, _


if __name__ == "__main__":
    main()
