"""Listen benchmark: how soon a client learns a task ended, pushed vs polled, and what an idle
stream costs the server.

    .venv/bin/python benchmarks/listen_latency.py [--streams 100] [--idle 1000] [--pollers 20]

1. `--streams` listen streams, each following its own task (`slow_compute`, staggered to end over
   about a second): the delay from the task's completion (its `lastUpdatedAt`, stamped by the
   server at the commit) to the `notifications/tasks` arriving at the client, p50/p99.
2. The same for `--pollers` clients polling `tasks/get` every `pollIntervalMs` (the server's
   advertised interval, random phase), measured the same way.
3. `--idle` idle streams (`toolsListChanged`): the server's resident memory before and after,
   per stream.

The server is the real `aml-mcp conformance-server` (authentication off) in its own process, with
the per-caller stream cap and the connection bound raised to admit the run's streams
(`server_limits`): every stream is the one local caller's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import _read_response, build_request, free_port

PROTOCOL = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


def envelope(method: str, params: dict[str, Any], request_id: Any, caps: dict[str, Any]) -> bytes:
    meta = {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientCapabilities": caps,
    }
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": meta}}
    ).encode()


def headers(method: str, name: str | None = None) -> dict[str, str]:
    out = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": method,
    }
    if name is not None:
        out["Mcp-Name"] = name
    return out


def parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class Connection:
    """One keep-alive connection for plain requests."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def call(self, method: str, params: dict[str, Any], name: str | None = None) -> dict[str, Any]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        assert self.reader is not None
        body = envelope(method, params, 1, TASKS)
        self.writer.write(build_request("127.0.0.1", self.port, "/mcp", body, headers(method, name)))
        status, payload = await _read_response(self.reader)
        message: dict[str, Any] = json.loads(payload)
        if status != 200 or "result" not in message:
            raise RuntimeError(f"{method} failed: {status} {payload[:200]!r}")
        return dict(message["result"])


async def open_stream(port: int, notifications: dict[str, Any], request_id: Any) -> asyncio.StreamReader:
    """Send a listen request; returns the reader positioned at the start of the (chunked) SSE body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = envelope("subscriptions/listen", {"notifications": notifications}, request_id, TASKS)
    writer.write(build_request("127.0.0.1", port, "/mcp", body, headers("subscriptions/listen")))
    head = await reader.readuntil(b"\r\n\r\n")
    if b" 200 " not in head.split(b"\r\n", 1)[0]:
        raise RuntimeError(f"listen refused: {head[:100]!r}")
    reader._aml_writer = writer  # type: ignore[attr-defined]  # keep the transport alive with the reader
    return reader


async def sse_messages(reader: asyncio.StreamReader):  # type: ignore[no-untyped-def]
    """De-chunk the body and yield each `data:` message, stamped with its arrival time."""
    buffer = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            return
        buffer += await reader.readexactly(size)
        await reader.readexactly(2)
        while b"\r\n\r\n" in buffer:
            event, buffer = buffer.split(b"\r\n\r\n", 1)
            for line in event.split(b"\r\n"):
                if line.startswith(b"data:"):
                    yield time.time(), json.loads(line[5:])


async def follow(port: int, task_id: str, index: int) -> float:
    reader = await open_stream(port, {"taskIds": [task_id]}, f"s{index}")
    async for arrived, message in sse_messages(reader):
        params = message.get("params", {})
        if message.get("method") == "notifications/tasks" and params.get("status") == "completed":
            reader._aml_writer.close()  # type: ignore[attr-defined]
            return arrived - parse_iso(params["lastUpdatedAt"])
    raise RuntimeError("stream ended before the task completed")


async def poll(port: int, task_id: str, interval: float) -> float:
    connection = Connection(port)
    await asyncio.sleep(random.uniform(0, interval))
    while True:
        state = await connection.call("tasks/get", {"taskId": task_id}, name=task_id)
        if state["status"] == "completed":
            return time.time() - parse_iso(state["lastUpdatedAt"])
        await asyncio.sleep(interval)


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def summary(label: str, delays: list[float]) -> str:
    ordered = sorted(delays)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    p50 = 1000 * statistics.median(ordered)
    return f"{label:<40} n={len(delays):4d}  p50 {p50:7.1f} ms  p99 {1000 * p99:7.1f} ms"


async def run(port: int, pid: int, streams: int, pollers: int, idle: int) -> None:
    connection = Connection(port)
    created = []
    for i in range(streams + pollers):
        result = await connection.call(
            "tools/call",
            {"name": "slow_compute", "arguments": {"seconds": 2.0 + 0.01 * i}},
            name="slow_compute",
        )
        created.append((str(result["taskId"]), int(result["pollIntervalMs"])))
    interval = created[0][1] / 1000
    pushed = asyncio.gather(*(follow(port, task_id, i) for i, (task_id, _) in enumerate(created[:streams])))
    polled = asyncio.gather(*(poll(port, task_id, interval) for task_id, _ in created[streams:]))
    pushed_delays, polled_delays = await asyncio.gather(pushed, polled)
    print(summary(f"listen push, {streams} open streams", list(pushed_delays)))
    print(summary(f"polling every pollIntervalMs={created[0][1]}", list(polled_delays)))

    await asyncio.sleep(0.5)
    before = rss_kib(pid)
    readers = [await open_stream(port, {"toolsListChanged": True}, i) for i in range(idle)]
    for reader in readers:
        async for _, message in sse_messages(reader):
            assert message["method"] == "notifications/subscriptions/acknowledged"
            break
    await asyncio.sleep(1.0)
    after = rss_kib(pid)
    print(
        f"{idle} idle streams: server RSS {before / 1024:.1f} MiB -> {after / 1024:.1f} MiB, "
        f"{(after - before) / idle:.1f} KiB per stream"
    )
    for reader in readers:
        reader._aml_writer.close()  # type: ignore[attr-defined]


HEADROOM = 64
"""Connections beyond the benchmark's own: its plain requests (creates, polls) and slack."""


def server_limits(streams: int, pollers: int, idle: int) -> dict[str, str]:
    """The benchmarked server's own settings: with authentication off every stream is the one local
    caller's, so the per-caller stream cap (16 by default, a guard against one principal holding the
    server's streams) and the open-connection bound must admit every stream this run opens."""
    held = streams + idle
    return {
        "AML_MCP_MAX_LISTEN_STREAMS_PER_PRINCIPAL": str(held + HEADROOM),
        "AML_MCP_HTTP__MAX_CONNECTIONS": str(held + pollers + HEADROOM),
    }


def main() -> None:
    import subprocess

    parser = argparse.ArgumentParser()
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--pollers", type=int, default=20)
    parser.add_argument("--idle", type=int, default=1000)
    args = parser.parse_args()
    port = free_port()
    data_dir = tempfile.mkdtemp(prefix="aml-listen-bench-")
    proc = subprocess.Popen(
        [sys.executable, "-m", "aml_mcp", "conformance-server", "--port", str(port), "--data-dir", data_dir],
        stderr=subprocess.DEVNULL,
        env={**os.environ, **server_limits(args.streams, args.pollers, args.idle)},
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                asyncio.run(Connection(port).call("server/discover", {}))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        asyncio.run(run(port, proc.pid, args.streams, args.pollers, args.idle))
    finally:
        proc.terminate()
        proc.wait(20)


if __name__ == "__main__":
    main()
