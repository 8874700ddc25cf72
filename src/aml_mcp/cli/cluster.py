"""`aml-mcp cluster`: a whole scale-out deployment on this machine, for trying it and for tests.

HAProxy (round-robin, health checks on /readyz; `deploy/haproxy.cfg.template`) in front of
`--replicas` API replicas (`--role api`), plus `--workers` workers running the task bodies, all on
one PostgreSQL schema of their own. It prints the connections the cluster may hold on PostgreSQL
first (per process and in all, with the formula: `persistence.deployment_budget`), then the MCP URL
on stdout and each process's metrics listener on stderr (a loopback port of its own, which the
balancer has no path to), then runs
until Ctrl-C or SIGTERM, and stops exactly the processes it started (by their PIDs), then drops
the schema it created (a schema given with `--schema` is kept).

Every replica and worker has a data directory of its own (`replica-N/`, `worker-N/` under the
work directory: logs' neighbours, the local audit file, the server record): everything they must
agree on (tasks, events, notes, baselines, revocations, the audit table, the development issuer's
clients and keys, the request-state key) is in PostgreSQL, so any of them can be killed and
replaced by a process that never saw the others' disks.

httpx and psycopg (the `server` extra) are imported where they are used, not with the module:
building the command line imports every command module.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from aml_mcp.cli.startup import EXIT_SETTINGS

DEFAULT_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
TEMPLATE = Path(__file__).resolve().parents[3] / "deploy" / "haproxy.cfg.template"
START_TIMEOUT_SECONDS = 60.0


def free_port() -> int:
    """A loopback port free right now (the child binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def haproxy_config(template: str, *, port: int, replicas: Sequence[int]) -> str:
    """The HAProxy configuration for a frontend on loopback `port` and replicas on `replicas` ports."""
    servers = "\n".join(f"    server r{index} 127.0.0.1:{p}" for index, p in enumerate(replicas, 1))
    return Template(template).substitute(bind=f"127.0.0.1:{port}", servers=servers)


@dataclass
class Cluster:
    """The processes of one local cluster; `stop()` ends each of them, by PID."""

    url: str
    schema: str
    haproxy: subprocess.Popen[bytes]
    replicas: list[tuple[int, subprocess.Popen[bytes]]] = field(default_factory=list)
    """(port, process) of each API replica."""
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    replica_metrics: dict[int, int] = field(default_factory=dict)
    """Replica port -> the port of that replica's metrics listener (loopback)."""
    worker_metrics: list[int] = field(default_factory=list)
    """The port of each worker's metrics listener (loopback), in the order of `workers`."""
    work_dir: Path | None = None
    """Where each process's log and data directory are."""

    def metrics_urls(self) -> list[tuple[str, str]]:
        """(process, URL) of every metrics listener: replicas first, then workers."""
        named = [(f"replica {n}", self.replica_metrics[port]) for n, (port, _) in enumerate(self.replicas, 1)]
        named += [(f"worker {n}", port) for n, port in enumerate(self.worker_metrics, 1)]
        return [(name, f"http://127.0.0.1:{port}/metrics") for name, port in named]

    @property
    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [self.haproxy, *(proc for _, proc in self.replicas), *self.workers]


def _spawn(args: Sequence[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(  # noqa: S603 - our own interpreter and haproxy, no shell
            list(args), env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
        )


def _wait_ready(url: str, proc: subprocess.Popen[bytes], what: str, log: Path) -> None:
    import httpx

    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited while starting; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        time.sleep(0.1)
    raise RuntimeError(f"{what} did not become ready within {START_TIMEOUT_SECONDS:.0f} s; see {log}")


def stop_all(processes: Sequence[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM to each process still running, then SIGKILL to those that outlast `timeout`."""
    for proc in processes:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in processes:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


@contextlib.contextmanager
def running_cluster(
    *,
    replicas: int,
    workers: int,
    database_url: str,
    schema: str | None = None,
    catalog: str = "conformance",
    port: int = 0,
    work_dir: Path | None = None,
    haproxy: str = "haproxy",
    env: dict[str, str] | None = None,
    role: str = "api",
    config: Path | None = None,
) -> Iterator[Cluster]:
    """HAProxy, `replicas` API replicas and `workers` workers, started and (on exit) stopped.

    `role="all"` makes the replicas run the tasks they create as well (workers, if any, then take
    what is left: overflow and recovery); `config` is a settings file every process reads (the
    conformance catalog with authentication on, for instance)."""
    import httpx  # noqa: F401 - before any process starts: the readiness checks need it
    import psycopg
    from psycopg import sql

    if role not in ("api", "all"):
        raise ValueError(f"a replica's role is 'api' or 'all', not {role!r}")
    if replicas < 1 or workers < 0:
        raise ValueError("a cluster needs at least one replica (and no negative number of workers)")
    program = shutil.which(haproxy)
    if program is None:
        raise FileNotFoundError(f"{haproxy} is not installed (Debian: apt-get install haproxy)")
    own_schema = schema is None
    schema = schema or f"cluster_{secrets.token_hex(6)}"
    work = work_dir or Path(tempfile.mkdtemp(prefix="aml-mcp-cluster-"))
    lb_port = port or free_port()
    url = f"http://127.0.0.1:{lb_port}/mcp"
    child_env = {
        **os.environ,
        **(env or {}),
        "AML_MCP_DATABASE_URL": database_url,
        "AML_MCP_DATABASE_SCHEMA": schema,
    }
    python = [sys.executable, "-m", "aml_mcp"]
    started: list[subprocess.Popen[bytes]] = []
    try:
        replica_ports: list[tuple[int, subprocess.Popen[bytes]]] = []
        replica_metrics: dict[int, int] = {}
        for index in range(replicas):
            replica_port = free_port()
            metrics_port = free_port()
            log = work / f"replica-{index + 1}.log"
            if catalog == "conformance":
                args = [*python, "conformance-server", "--port", str(replica_port)]
            else:
                args = [*python, "serve", "--port", str(replica_port)]
            data_dir = work / f"replica-{index + 1}"
            args += ["--data-dir", str(data_dir), "--role", role, "--public-url", url]
            args += [] if config is None else ["--config", str(config)]
            args += ["--metrics-port", str(metrics_port)]
            proc = _spawn(args, child_env, log)
            started.append(proc)
            # One at a time: the first start creates the schema's tables and loads any demo data.
            _wait_ready(f"http://127.0.0.1:{replica_port}/readyz", proc, f"replica {index + 1}", log)
            replica_ports.append((replica_port, proc))
            replica_metrics[replica_port] = metrics_port
        worker_procs = []
        worker_metrics: list[int] = []
        health: list[tuple[int, subprocess.Popen[bytes], Path]] = []
        for index in range(workers):
            health_port = free_port()
            metrics_port = free_port()
            log = work / f"worker-{index + 1}.log"
            args = [*python, "worker", "--catalog", catalog, "--data-dir", str(work / f"worker-{index + 1}")]
            args += ["--health-port", str(health_port), "--metrics-port", str(metrics_port)]
            args += [] if config is None else ["--config", str(config)]
            proc = _spawn(args, child_env, log)
            started.append(proc)
            worker_procs.append(proc)
            health.append((health_port, proc, log))
            worker_metrics.append(metrics_port)
        # Started together, then awaited: ready means listening for new tasks, so nothing the
        # cluster's first client creates waits for a worker's start-up.
        for index, (health_port, proc, log) in enumerate(health):
            _wait_ready(f"http://127.0.0.1:{health_port}/readyz", proc, f"worker {index + 1}", log)
        config = work / "haproxy.cfg"
        config.write_text(
            haproxy_config(TEMPLATE.read_text(), port=lb_port, replicas=[p for p, _ in replica_ports])
        )
        lb = _spawn([program, "-f", str(config), "-db"], child_env, work / "haproxy.log")
        started.append(lb)
        _wait_ready(f"http://127.0.0.1:{lb_port}/readyz", lb, "haproxy", work / "haproxy.log")
        yield Cluster(
            url=url,
            schema=schema,
            haproxy=lb,
            replicas=replica_ports,
            workers=worker_procs,
            replica_metrics=replica_metrics,
            worker_metrics=worker_metrics,
            work_dir=work,
        )
    finally:
        stop_all(started)
        if own_schema:
            with contextlib.suppress(psycopg.Error), psycopg.connect(database_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def pool_size(env: Mapping[str, str]) -> int:
    """The `database_pool_size` the cluster's processes will run with (they inherit `env`)."""
    from aml_mcp.config import Settings

    given = env.get("AML_MCP_DATABASE_POOL_SIZE")
    default: int = Settings.model_fields["database_pool_size"].default
    return int(given) if given and given.strip().isdigit() else default


def budget_line(replicas: int, workers: int, env: Mapping[str, str]) -> str:
    """What the cluster holds on PostgreSQL at most, per process and in all, and the formula."""
    from aml_mcp.persistence import deployment_budget

    return f"aml-mcp cluster: {deployment_budget(replicas, workers, pool_size(env))}"


def token_hint(cluster: Cluster, database_url: str) -> str:
    """How to get a token this cluster accepts, as the user runs `aml-mcp`: signed with the
    development issuer's key in the cluster's database and schema (a command without the schema
    would mint with another schema's key), for the balancer's URL."""
    from aml_mcp.cli.options import shared_state_args
    from aml_mcp.cli.serve import command_prefix

    env, shared = shared_state_args(database_url, cluster.schema)
    return (
        "aml-mcp cluster: a token for scripts (the development issuer's key in this schema):\n"
        f"    {env}{command_prefix()} token{shared} --public-url {cluster.url} --subject carol"
        ' --tenant meridian-bank --scope "aml:read aml:eval aml:draft"'
    )


def _cluster(args: argparse.Namespace) -> int:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one line per readiness poll
    stop = {"signal": 0}
    # First, so an operator sees what the cluster will ask of the server even if it cannot start.
    print(budget_line(args.replicas, args.workers, os.environ), file=sys.stderr, flush=True)

    def on_signal(sig: int, frame: Any) -> None:
        stop["signal"] = sig

    try:
        database_url = args.database_url or os.environ.get("AML_MCP_DATABASE_URL", DEFAULT_DATABASE_URL)
        with running_cluster(
            replicas=args.replicas,
            workers=args.workers,
            database_url=database_url,
            schema=args.schema,
            catalog=args.catalog,
            port=args.port,
        ) as cluster:
            print(cluster.url, flush=True)
            pids = ", ".join(str(proc.pid) for proc in cluster.processes)
            print(
                f"aml-mcp cluster: haproxy + {args.replicas} API replicas + {args.workers} workers on schema "
                f"{cluster.schema} (pids {pids}; logs in {cluster.work_dir}); Ctrl-C stops them",
                file=sys.stderr,
                flush=True,
            )
            if args.catalog == "aml":
                print(token_hint(cluster, database_url), file=sys.stderr, flush=True)
            listeners = ", ".join(f"{name} {url}" for name, url in cluster.metrics_urls())
            print(f"metrics (loopback only, not through haproxy): {listeners}", file=sys.stderr, flush=True)
            signal.signal(signal.SIGTERM, on_signal)
            signal.signal(signal.SIGINT, on_signal)
            while not stop["signal"]:
                time.sleep(0.2)
    except RuntimeError as exc:
        print(f"aml-mcp cluster: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    print("aml-mcp cluster stopped", file=sys.stderr)
    return 0


def add_commands(commands: Any) -> None:
    cluster = commands.add_parser(
        "cluster", help="run HAProxy, API replicas and workers on this machine (local PostgreSQL)"
    )
    cluster.add_argument("--replicas", type=int, default=3, help="API replicas (default 3)")
    cluster.add_argument("--workers", type=int, default=2, help="workers running task bodies (default 2)")
    cluster.add_argument("--port", type=int, default=0, help="HAProxy's loopback port (default: a free one)")
    cluster.add_argument(
        "--database-url", help=f"PostgreSQL (default: AML_MCP_DATABASE_URL, else {DEFAULT_DATABASE_URL})"
    )
    cluster.add_argument("--schema", help="schema to use and keep (default: a fresh one, dropped at the end)")
    cluster.add_argument(
        "--catalog",
        choices=("aml", "conformance"),
        default="aml",
        help="serve the AML tools (default; authentication as configured) or the conformance fixtures",
    )
    cluster.set_defaults(run=_cluster)
