"""Durable task creates and `tasks/get` on SQLite and on PostgreSQL, in one run, as ratios.

    .venv/bin/python benchmarks/scaleout_throughput.py [--rounds 3] [--duration 4]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

Five set-ups serve the conformance fixtures with authentication on (the development issuer; one
token per caller) and are all up at once; the task is `slow_compute` with `seconds: 0`:

- `sqlite`: one `aml-mcp conformance-server` on its data dir (role all), requests straight to it;
- `pg 1+1`: HAProxy, one API replica (`--role api`) and one worker on PostgreSQL;
- `pg 3+1`: the same with three API replicas;
- `pg own x1`: HAProxy and one replica that runs the tasks it creates (`--role all`), no worker;
- `pg own x3`: the same with three such replicas.

Each round runs every workload — `create` and `get`, at c=1 and c=16 connections, the requests
spread over 16 callers (analysts) of one tenant (bank) or of 16 tenants — on every set-up, the
set-ups' order rotating from round to round, so a shared machine's load falls on all alike; before
each run every set-up's backlog of running tasks is drained, so no run pays for another's tasks. For each
run it prints answers/s, p50 and p99, the tasks its creates left running when it ended, and the CPU
per answer of our processes (replicas, workers, HAProxy) and of the PostgreSQL backends serving them
(found through their sockets), counted until those tasks have run: a set-up whose runners fall
behind pays for the work it put off. The summary gives, per workload, the median over the rounds of
each round's ratio against `sqlite` (and of three replicas against one, for either role), with the
range.

Nothing is pinned: on one 2-core host the replicas, the worker, HAProxy, PostgreSQL and this load
generator share the cores; compare rows of one run only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import secrets
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from aml_mcp.cli.cluster import running_cluster  # noqa: E402
from loadgen import build_request, process_cpu_seconds, run_load, spawn_server  # noqa: E402
from tasks_http import call_body, get_body, headers  # noqa: E402

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
SETUPS = ("sqlite", "pg 1+1", "pg 3+1", "pg own x1", "pg own x3")
THREE_AGAINST_ONE = (("pg 3+1", "pg 1+1"), ("pg own x3", "pg own x1"))
TENANTS = 16
CALLERS = 16
SERVER_ENV = {
    "AML_MCP_LOG_LEVEL": "warning",
    # The quotas would refuse creates whenever the runner falls behind; refusals are not measured.
    "AML_MCP_TASKS__MAX_ACTIVE_PER_PRINCIPAL": "1000000",
    "AML_MCP_TASKS__MAX_ACTIVE_PER_TENANT": "1000000",
    "AML_MCP_TASKS__MAX_CREATED_PER_PRINCIPAL_PER_WINDOW": "1000000000",
    # Every create counts its principal's creates in the window, up to the limit. With the default
    # window (60 s) and a lifted limit that is every task one caller made in the last minute — 20,000
    # and more here, where the default limit (120) caps the count at 120 — so a one-second window
    # keeps the count near what a deployment's is, on both backends alike.
    "AML_MCP_TASKS__CREATE_WINDOW_SECONDS": "1",
}
UNFINISHED = "SELECT count(*) FROM tasks WHERE status = 'working'"
SQLITE_FILE = "aml-mcp.db"
"""The SQLite server's store in its data directory (`aml_mcp.persistence.SQLITE_FILE`)."""
DRAIN_SECONDS = 300.0
CONFIG = "[auth]\nenabled = true\n"
"""Authentication on, the development issuer trusted: every request carries a caller's token, as in
production (the gate, the audit trail and the per-tenant quota paths all run)."""


@dataclass
class Setup:
    """A running set-up: where to send requests, whose CPU to count, how to mint its tokens."""

    name: str
    port: int
    pids: list[int]
    mint: Callable[[str, str], str]
    unfinished: Callable[[], int]
    """Tasks of this set-up still `working`: the backlog a create run leaves for its runners."""
    tokens: dict[tuple[str, str], str] = field(default_factory=dict)

    def token(self, caller: tuple[str, str]) -> str:
        if caller not in self.tokens:
            self.tokens[caller] = self.mint(*caller)
        return self.tokens[caller]


def _mint(args: Sequence[str], env: dict[str, str]) -> Callable[[str, str], str]:
    """`aml-mcp token` with `args`, for a tenant and a subject (the process reads the issuer's key)."""

    def mint(tenant: str, subject: str) -> str:
        command = [sys.executable, "-m", "aml_mcp", "token", *args, "--tenant", tenant, "--subject", subject]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=60)
        return done.stdout.strip()

    return mint


@contextlib.contextmanager
def sqlite_server(work: Path, config: Path) -> Iterator[Setup]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AML_MCP_DATABASE")} | SERVER_ENV
    data = work / "sqlite"
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        proc, port = spawn_server(
            [
                sys.executable,
                "-m",
                "aml_mcp",
                "conformance-server",
                "--config",
                str(config),
                "--data-dir",
                str(data),
            ],
            "sqlite",
        )
    finally:
        os.environ.clear()
        os.environ.update(saved)
    try:
        args = ["--config", str(config), "--data-dir", str(data), "--port", str(port)]

        def unfinished() -> int:
            with contextlib.closing(sqlite3.connect(f"file:{data / SQLITE_FILE}?mode=ro", uri=True)) as conn:
                return int(conn.execute(UNFINISHED).fetchone()[0])

        yield Setup("sqlite", port, [proc.pid], _mint(args, env), unfinished)
    finally:
        proc.terminate()
        proc.wait(20)


@contextlib.contextmanager
def pg_cluster(name: str, replicas: int, workers: int, role: str, url: str, config: Path) -> Iterator[Setup]:
    schema = f"bench_{secrets.token_hex(6)}"
    with running_cluster(
        replicas=replicas,
        workers=workers,
        role=role,
        database_url=url,
        schema=schema,
        env=SERVER_ENV,
        config=config,
    ) as running:
        port = int(running.url.removesuffix("/mcp").rsplit(":", 1)[1])
        pids = [
            running.haproxy.pid,
            *(proc.pid for _, proc in running.replicas),
            *(p.pid for p in running.workers),
        ]
        env = dict(os.environ) | SERVER_ENV | {"AML_MCP_DATABASE_SCHEMA": schema}
        args = ["--config", str(config), "--database-url", url, "--public-url", running.url]

        def unfinished() -> int:
            with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
                row = conn.execute(UNFINISHED).fetchone()
                return 0 if row is None else int(row[0])

        try:
            yield Setup(name, port, pids, _mint(args, env), unfinished)
        finally:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # a name made here: a-z, 0-9, _


# -- CPU of the PostgreSQL backends serving a set-up --------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    found: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    found.add(target[8:-1])
    return found


def _local_ports_to(remote_port: int, inodes: set[str]) -> set[int]:
    """Local ports of this host's TCP connections to `remote_port` whose socket is one of `inodes`."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                local, remote, inode = fields[1], fields[2], fields[9]
                if int(remote.rsplit(":", 1)[1], 16) == remote_port and inode in inodes:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def backend_pids(url: str, pids: Sequence[int]) -> list[int]:
    """The PostgreSQL backends whose client is one of `pids` (a server on this host)."""
    inodes = set().union(*(_socket_inodes(pid) for pid in pids))
    server_port = psycopg.conninfo.conninfo_to_dict(url).get("port") or 5432
    ports = _local_ports_to(int(server_port), inodes)
    if not ports:
        return []
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)", (list(ports),))
        return [int(row[0]) for row in rows]


def cpu_of(pids: Sequence[int]) -> dict[int, float]:
    seconds: dict[int, float] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            seconds[pid] = process_cpu_seconds(pid)
    return seconds


# -- one run ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    answered: float
    """Successful answers per second (a refusal is fast and would flatter a set-up)."""
    p50_ms: float
    p99_ms: float
    ours_ms: float
    """CPU of our processes per answer."""
    database_ms: float
    """CPU of the PostgreSQL backends serving them per answer (0 on SQLite)."""
    errors: int
    left_running: int
    """Tasks still running when the run ended (their running is in the CPU figures)."""


def requests_for(
    setup: Setup, workload: str, tenants: int
) -> tuple[Callable[[int], bytes], Callable[[int, bytes], bool]]:
    """Pre-encoded requests, the n-th from caller n % `CALLERS`, of tenant n % `tenants`. One bank's
    analysts share its task quota (a create counts the tenant's unfinished tasks under the tenant's
    lock) and each has a create window of their own."""
    names = [(f"bank-{k % tenants:02d}", f"analyst-{k:02d}") for k in range(CALLERS)]
    auth = {name: {"Authorization": f"Bearer {setup.token(name)}"} for name in names}
    if workload == "create":
        encoded = [
            build_request(
                "127.0.0.1", setup.port, "/mcp", call_body(1), headers("tools/call", "slow_compute") | auth[n]
            )
            for n in names
        ]
        marker = b'"resultType":"task"'
    else:
        encoded = []
        for name in names:
            task_id = completed_task_as(setup, name)
            encoded.append(
                build_request(
                    "127.0.0.1",
                    setup.port,
                    "/mcp",
                    get_body(7, task_id),
                    headers("tasks/get", task_id) | auth[name],
                )
            )
        marker = b'"status":"completed"'

    def ok(status: int, body: bytes) -> bool:
        return status == 200 and marker in body.replace(b": ", b":")

    return (lambda n: encoded[n % len(encoded)]), ok


def completed_task_as(setup: Setup, caller: tuple[str, str]) -> str:
    """A completed task of `caller` (tenant, subject), to read again and again."""
    auth = {"Authorization": f"Bearer {setup.token(caller)}"}
    base = f"http://127.0.0.1:{setup.port}/mcp"
    with httpx.Client(timeout=30) as http:
        created = http.post(base, content=call_body(1), headers=headers("tools/call", "slow_compute") | auth)
        task_id = str(_result(created)["taskId"])
        for _ in range(500):
            got = http.post(base, content=get_body(2, task_id), headers=headers("tasks/get", task_id) | auth)
            if _result(got)["status"] == "completed":
                return task_id
            time.sleep(0.01)
    raise RuntimeError(f"{setup.name}: the set-up task never completed")


def _result(answer: httpx.Response) -> dict[str, object]:
    if answer.status_code != 200:
        raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:300]}")
    text = answer.text
    if text.startswith(("event:", "data:")):  # a stream's single message
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    result = json.loads(text).get("result")
    if not isinstance(result, dict):
        raise RuntimeError(f"no result: {text[:300]}")
    return result


def measure(setup: Setup, workload: str, connections: int, tenants: int, duration: float, url: str) -> Run:
    make, ok = requests_for(setup, workload, tenants)
    backends = backend_pids(url, setup.pids) if setup.name != "sqlite" else []
    ours_before, db_before = cpu_of(setup.pids), cpu_of(backends)
    result = asyncio.run(
        run_load(
            "127.0.0.1",
            setup.port,
            make,
            connections=connections,
            duration=duration,
            server_pid=setup.pids[0],
            ok=ok,
            warmup=0.0,
        )
    )
    left_running = setup.unfinished()
    drain([setup])
    ours_after, db_after = cpu_of(setup.pids), cpu_of(backends)
    if setup.name != "sqlite":  # backends opened during the run count from their start
        for pid in backend_pids(url, setup.pids):
            db_after.setdefault(pid, cpu_of([pid]).get(pid, 0.0))
    ours = sum(ours_after.get(p, 0.0) - s for p, s in ours_before.items())
    database = sum(after - db_before.get(p, 0.0) for p, after in db_after.items())
    good = max(result.requests - result.errors, 1)
    return Run(
        answered=(result.requests - result.errors) / result.seconds,
        p50_ms=1000 * statistics.median(result.latencies) if result.latencies else 0.0,
        p99_ms=1000 * result.percentile(0.99) if result.latencies else 0.0,
        ours_ms=1000 * ours / good,
        database_ms=1000 * database / good,
        errors=result.errors,
        left_running=left_running,
    )


def drain(setups: Sequence[Setup]) -> None:
    """Wait until no set-up has a task left running: a create run leaves a backlog its runners work
    off afterwards, and on shared cores that work would be counted against whatever runs next."""
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        left = {setup.name: setup.unfinished() for setup in setups}
        if not any(left.values()):
            return
        time.sleep(0.5)
    print(f"  (still running after {DRAIN_SECONDS:.0f} s: {left}; measuring anyway)", flush=True)


def _summary(runs: dict[tuple[int, str, str], Run], rounds: int, workloads: list[str]) -> list[str]:
    lines = ["", "median [min-max] over the rounds of each round's ratio:"]
    for workload in workloads:
        for setup in SETUPS[1:]:
            ratios = [
                runs[(r, workload, setup)].answered / max(runs[(r, workload, "sqlite")].answered, 1e-9)
                for r in range(rounds)
            ]
            cpu = [
                (runs[(r, workload, setup)].ours_ms + runs[(r, workload, setup)].database_ms)
                / max(runs[(r, workload, "sqlite")].ours_ms, 1e-9)
                for r in range(rounds)
            ]
            lines.append(
                f"  {workload:<22} {setup:<10} / sqlite: answers {statistics.median(ratios):.2f}x"
                f" [{min(ratios):.2f}-{max(ratios):.2f}]  CPU per answer (ours + database)"
                f" {statistics.median(cpu):.2f}x [{min(cpu):.2f}-{max(cpu):.2f}]"
            )
        for three, one in THREE_AGAINST_ONE:
            ratios = [
                runs[(r, workload, three)].answered / max(runs[(r, workload, one)].answered, 1e-9)
                for r in range(rounds)
            ]
            lines.append(
                f"  {workload:<22} {three} / {one}: {statistics.median(ratios):.2f}x"
                f" [{min(ratios):.2f}-{max(ratios):.2f}]"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per run")
    parser.add_argument("--database-url", default=os.environ.get("AML_MCP_TEST_DATABASE_URL", DEFAULT_URL))
    parser.add_argument(
        "--only",
        default="",
        metavar="TEXT",
        help="run only the workloads whose name holds TEXT, e.g. 'get c=16'",
    )
    args = parser.parse_args()
    url = args.database_url
    work = Path(tempfile.mkdtemp(prefix="aml-scaleout-bench-"))
    config = work / "bench.toml"
    config.write_text(CONFIG)
    workloads = [
        f"{kind} c={c} {t} tenant{'s' if t > 1 else ''}"
        for kind in ("create", "get")
        for c in (1, 16)
        for t in (1, TENANTS)
    ]
    workloads = [workload for workload in workloads if args.only in workload]
    print(
        f"{os.cpu_count()} cores, nothing pinned; {args.rounds} rounds of {args.duration:.0f} s runs",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        setups = [
            stack.enter_context(sqlite_server(work, config)),
            stack.enter_context(pg_cluster("pg 1+1", 1, 1, "api", url, config)),
            stack.enter_context(pg_cluster("pg 3+1", 3, 1, "api", url, config)),
            stack.enter_context(pg_cluster("pg own x1", 1, 0, "all", url, config)),
            stack.enter_context(pg_cluster("pg own x3", 3, 0, "all", url, config)),
        ]
        runs: dict[tuple[int, str, str], Run] = {}
        for round_ in range(args.rounds):
            for workload in workloads:
                kind, c, t = workload.split()[0], int(workload.split()[1][2:]), int(workload.split()[2])
                order = setups[round_ % len(setups) :] + setups[: round_ % len(setups)]
                for setup in order:
                    drain(setups)
                    run = measure(setup, kind, c, t, args.duration, url)
                    runs[(round_, workload, setup.name)] = run
                    print(
                        f"round {round_ + 1} {workload:<22} {setup.name:<10} {run.answered:7.0f}/s"
                        f"  p50 {run.p50_ms:7.2f} ms  p99 {run.p99_ms:7.2f} ms"
                        f"  CPU/answer ours {run.ours_ms:5.2f} ms + database {run.database_ms:5.2f} ms"
                        f"  errors {run.errors}  left running {run.left_running}",
                        flush=True,
                    )
    print("\n".join(_summary(runs, args.rounds, workloads)))


if __name__ == "__main__":
    main()
