"""Client-observed task latency: from a task's completion to `await handle.result()` returning in
`aml_mcp.client`, waiting by listening (`subscriptions/listen` with the task's id) vs by polling
(`tasks/get` every `pollIntervalMs`), p50/p99.

    .venv/bin/python benchmarks/task_result_latency.py [--tasks 16] [--seconds 1.0]

Each mode starts `--tasks` `slow_compute` tasks at once (staggered by 10 ms, so they end spread over
the poll interval) through one `McpClient` and waits for all their results concurrently. The delay
of one task is the client's clock when `result()` returned minus the task's `lastUpdatedAt` in its
final state (stamped by the server when it committed the completion; same machine, same clock).
The server is the real `aml-mcp conformance-server` (authentication off) in its own process.
Each handle opens its own listen stream, and the server allows 16 per caller by default: with more
tasks than that, the handles it refuses wait by polling (as they should), which the figures show.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from aml_mcp.client import McpClient, TaskHandle
from loadgen import free_port


def _parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


async def _one(client: McpClient, index: int, seconds: float, delays: list[float]) -> None:
    await anyio.sleep(0.01 * index)
    outcome = await client.call_tool("slow_compute", {"seconds": seconds, "label": f"task {index}"})
    assert isinstance(outcome, TaskHandle), outcome
    await outcome.result()
    returned = time.time()
    assert outcome.state.last_updated_at is not None
    delays.append(returned - _parse_iso(outcome.state.last_updated_at))


async def measure(url: str, *, listen: bool, tasks: int, seconds: float) -> list[float]:
    delays: list[float] = []
    async with McpClient(url, listen=listen) as client, anyio.create_task_group() as group:
        for index in range(tasks):
            group.start_soon(_one, client, index, seconds, delays)
    return delays


def summary(label: str, delays: list[float]) -> str:
    ordered = sorted(delays)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return (
        f"{label:<10} n={len(ordered):<4} p50 {statistics.median(ordered) * 1000:7.1f} ms   "
        f"p99 {p99 * 1000:7.1f} ms   max {ordered[-1] * 1000:7.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="task-result-latency-")
    command = [
        sys.executable,
        "-m",
        "aml_mcp",
        "conformance-server",
        "--port",
        str(port),
        "--data-dir",
        data_dir,
    ]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}/mcp"
        print(f"{args.tasks} tasks of {args.seconds:g} s each, per mode")
        for label, listen in (("listening", True), ("polling", False)):
            delays = anyio.run(
                lambda listen=listen: measure(url, listen=listen, tasks=args.tasks, seconds=args.seconds)
            )
            print(summary(label, delays))
    finally:
        server.terminate()
        server.wait(10)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
