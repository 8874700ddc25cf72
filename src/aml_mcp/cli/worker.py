"""`aml-mcp worker`: runs task bodies only, for API replicas started with `--role api`.

A worker shares the tasks on `--database-url` with the replicas: it claims tasks nobody holds (the
replicas create them unleased), holds them under heartbeated leases, and takes over those whose
holder died, exactly as the in-process runner of a single server does. It answers no MCP requests:
it runs the app's lifetime (migrations, runner, sweeper, event bus) without an HTTP listener,
unless `--health-port` asks for `/healthz` and `/readyz` on loopback; `--metrics-port` adds the
metrics listener (its claim lag and lease takeovers are counted here, where tasks are claimed).

A stop signal (SIGTERM, Ctrl-C) ends the lifetime normally, so the leases it holds are handed back
at once instead of lapsing.

The server is imported in the functions that run the worker, not with the module: building the
command line imports every command module.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aml_mcp.cli.serve import add_metrics_options, metrics_url
from aml_mcp.cli.startup import EXIT_SETTINGS, bind_listener, check_data_dir

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from aml_mcp.catalog import Catalog
    from aml_mcp.cli.metrics_listener import MetricsServer
    from aml_mcp.config import Settings


def worker_settings(args: argparse.Namespace) -> Settings:
    """The settings a worker runs on; the conformance catalog runs without authentication, as its server."""
    from aml_mcp.config import AuthSettings, Settings, load_settings

    given: dict[str, Any] = {
        "database_url": args.database_url,
        "role": "all",
        "metrics_host": args.metrics_host,
        "metrics_port": args.metrics_port,
    }
    if args.health_port is not None:
        given |= {"host": "127.0.0.1", "port": args.health_port}
    if args.catalog == "conformance":
        data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="aml-mcp-worker-"))
        given = {key: value for key, value in given.items() if value is not None}
        return Settings(data_dir=data_dir, log_level="warning", auth=AuthSettings(enabled=False), **given)
    return load_settings(args.config, data_dir=args.data_dir, **given)


async def run_lifetime(
    app: Starlette, metrics: tuple[MetricsServer, socket.socket] | None = None
) -> int | None:
    """The app's lifetime with no listener but the metrics one (when given), until SIGTERM or
    SIGINT; returns the signal."""
    import anyio

    from aml_mcp.cli.metrics_listener import serve_metrics

    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with app.router.lifespan_context(app), anyio.create_task_group() as group:
            if metrics is not None:
                group.start_soon(serve_metrics, *metrics)
            print("aml-mcp worker running task bodies", file=sys.stderr, flush=True)
            try:
                async for received in signals:
                    app.state.runtime.begin_shutdown()
                    return int(received)
            finally:
                if metrics is not None:
                    metrics[0].stop()
    return None


def _worker(args: argparse.Namespace) -> int:
    import anyio

    from aml_mcp.app import build_app
    from aml_mcp.cli.metrics_listener import metrics_server
    from aml_mcp.cli.serve_run import run_server

    settings = worker_settings(args)
    if settings.database_url is None:
        print(
            "aml-mcp worker needs --database-url (or AML_MCP_DATABASE_URL): it runs the tasks API "
            "replicas store there",
            file=sys.stderr,
        )
        return EXIT_SETTINGS
    check_data_dir(settings)
    metrics_sock: socket.socket | None = None
    if settings.metrics_port is not None:
        metrics_sock = bind_listener(settings.metrics_host, settings.metrics_port)
        settings = settings.model_copy(update={"metrics_port": int(metrics_sock.getsockname()[1])})
    try:
        catalog: Catalog | None = None
        if args.catalog == "conformance":
            from aml_mcp.conformance.fixtures import fixture_catalog

            catalog = fixture_catalog()
        app = build_app(settings, catalog=catalog)
        if (url := metrics_url(settings)) is not None:
            print(f"metrics (Prometheus text): {url}", file=sys.stderr, flush=True)
        if args.health_port is not None:
            run_server(app, settings, metrics_sock=metrics_sock)
            return 0
        metrics = (
            None if metrics_sock is None else (metrics_server(app.state.metrics_app, settings), metrics_sock)
        )
        stopped_by = anyio.run(run_lifetime, app, metrics)
    finally:
        if metrics_sock is not None:
            metrics_sock.close()
    if stopped_by is not None:
        print(f"aml-mcp worker stopped ({signal.Signals(stopped_by).name})", file=sys.stderr)
    return 0


def add_commands(commands: Any) -> None:
    worker = commands.add_parser("worker", help="run task bodies for API replicas (--role api)")
    worker.add_argument("--database-url", help="the shared PostgreSQL database the replicas use")
    worker.add_argument(
        "--catalog",
        choices=("aml", "conformance"),
        default="aml",
        help="whose tools to run: the AML tools (default) or the conformance fixtures",
    )
    worker.add_argument("--data-dir", type=Path, help="local data directory (default ./var)")
    worker.add_argument("--config", type=Path, help="a TOML settings file")
    worker.add_argument("--health-port", type=int, help="serve /healthz and /readyz on this loopback port")
    add_metrics_options(worker)
    worker.set_defaults(run=_worker)
