"""A lean HTTP/1.1 load generator over keep-alive connections, and server CPU accounting.

httpx spends more CPU per request than the servers it would be measuring; this client sends
pre-encoded requests on raw asyncio streams and parses only what it must (status line,
Content-Length), so the server, not the client, is the bottleneck being measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (and its reaped children) from /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    utime, stime, cutime, cstime = (int(fields[i]) for i in (11, 12, 13, 14))
    return (utime + stime + cutime + cstime) / CLOCK_TICKS


def build_request(host: str, port: int, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", f"Content-Length: {len(body)}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    chunked = False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        lowered = name.strip().lower()
        if lowered == b"content-length":
            length = int(value)
        elif lowered == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = bytearray()
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return status, bytes(body)
        body += await reader.readexactly(size)
        await reader.readexactly(2)


@dataclass
class RunResult:
    requests: int
    seconds: float
    latencies: list[float]
    errors: int
    server_cpu: float

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def cpu_per_request_ms(self) -> float:
        return 1000 * self.server_cpu / max(self.requests, 1)

    def row(self, label: str) -> str:
        return (
            f"{label:<34} {self.throughput:9.0f} req/s"
            f"  p50 {1000 * statistics.median(self.latencies):6.2f} ms"
            f"  p99 {1000 * self.percentile(0.99):6.2f} ms  server CPU {self.cpu_per_request_ms:6.3f} ms/req"
            f"  errors {self.errors}"
        )


async def run_load(
    host: str,
    port: int,
    make_request: Callable[[int], bytes],
    *,
    connections: int,
    duration: float,
    server_pid: int,
    warmup: float = 0.5,
    ok: Callable[[int, bytes], bool] = lambda status, body: status == 200,
) -> RunResult:
    """Drive `connections` keep-alive connections for `duration` seconds (after a warm-up)."""
    latencies: list[float] = []
    errors = 0
    counter = 0
    measuring = False
    stop_at = 0.0

    async def worker() -> None:
        nonlocal errors, counter
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while True:
                now = time.perf_counter()
                if measuring and now >= stop_at:
                    return
                counter += 1
                writer.write(make_request(counter))
                start = time.perf_counter()
                status, body = await _read_response(reader)
                elapsed = time.perf_counter() - start
                if measuring:
                    latencies.append(elapsed)
                    if not ok(status, body):
                        errors += 1
        finally:
            writer.close()

    tasks = [asyncio.create_task(worker()) for _ in range(connections)]
    await asyncio.sleep(warmup)
    cpu_before = process_cpu_seconds(server_pid)
    started = time.perf_counter()
    stop_at = started + duration
    measuring = True
    await asyncio.gather(*tasks)
    seconds = time.perf_counter() - started
    cpu = process_cpu_seconds(server_pid) - cpu_before
    return RunResult(len(latencies), seconds, latencies, errors, cpu)


def load_then_stop(
    proc: subprocess.Popen[bytes],
    port: int,
    make_request: Callable[[int], bytes],
    *,
    connections: int,
    duration: float,
    ok: Callable[[int, bytes], bool],
) -> RunResult:
    """Drive the server process listening on `port`, then stop it, whatever happened."""
    try:
        return asyncio.run(
            run_load(
                "127.0.0.1",
                port,
                make_request,
                connections=connections,
                duration=duration,
                server_pid=proc.pid,
                ok=ok,
            )
        )
    finally:
        proc.terminate()
        proc.wait(20)


def summarize_ratio(label: str, ours: RunResult, baseline: RunResult) -> str:
    return (
        f"{label}: throughput {ours.throughput / baseline.throughput:.2f}x of baseline, "
        f"server CPU per request {ours.cpu_per_request_ms / baseline.cpu_per_request_ms:.2f}x of baseline"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def spawn_server(
    args: Sequence[str], label: str, *, timeout: float = 60.0
) -> tuple[subprocess.Popen[bytes], int]:
    """Start `args --port P` (a server process) on a free port; return once it accepts connections."""
    port = free_port()
    proc = subprocess.Popen([*args, "--port", str(port)])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{label} server did not start")


def split_cores() -> tuple[int, int]:
    """(server core, load generator core); pins this process (the load generator) to its core."""
    cores = sorted(os.sched_getaffinity(0))
    server_cpu, client_cpu = cores[-1], cores[0]
    pin_to([client_cpu])
    return server_cpu, client_cpu


def pin_to(cpus: Sequence[int]) -> None:
    """Keep the load generator and the server on different cores where the machine allows it."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, set(cpus))
