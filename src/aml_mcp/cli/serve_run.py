"""What `aml-mcp serve` and `aml-mcp conformance-server` do once their arguments are parsed
(`aml_mcp.cli.serve`): check the data directory and bind the sockets, load the demo corpus into an
empty notes store, build the app, print the banner and run uvicorn with a stop hook that ends
listen streams before uvicorn waits for connections (and the metrics listener beside it).

Imported only when one of them (or `worker`) runs: it imports the whole server, seconds of CPU and
the `server` extra, which the command line's other uses must not need.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any, cast

import uvicorn
from starlette.applications import Starlette
from threadpoolctl import threadpool_limits

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.search.choice import EmbedderKind
from aml_mcp.app import Runtime, build_app
from aml_mcp.auth.challenge import resource_metadata_url
from aml_mcp.auth.redaction import install_access_log_redaction
from aml_mcp.catalog import Catalog
from aml_mcp.cli.case_notes import open_notes
from aml_mcp.cli.data_dir_lock import hold_data_dir
from aml_mcp.cli.logs import configure_logging
from aml_mcp.cli.metrics_listener import metrics_server, run_beside
from aml_mcp.cli.options import shared_state_args, trusted_issuers
from aml_mcp.cli.serve import command_prefix, metrics_url, serve_refusal, shared_options
from aml_mcp.cli.startup import EXIT_SETTINGS, bind_listener, check_data_dir
from aml_mcp.config import AuthSettings, Settings, load_settings
from aml_mcp.devauth.users import DEMO_USERS
from aml_mcp.devauth.wiring import CLI_CLIENT_ID, SERVICE_CLIENT_ID, dev_issuer
from aml_mcp.http.protocol import uvicorn_options
from aml_mcp.lab.wiring import page_url

BACKGROUND_NOTES_PER_S = 11
"""The background move's measured rate on 2 shared cores, beside the serving server (docs/aml-tools.md:
3 x 2,000 demo notes in about nine minutes; 589 s in the newcomer review): for the estimate `serve`
prints. A one-shot ingest runs faster (25-30 notes/s, benchmarks/search_quality.py), which made the
estimate say 4 minutes."""


class _Server(uvicorn.Server):
    """Tells the app a stop signal arrived before uvicorn starts waiting for open requests, and
    ends the process normally after a signal-initiated shutdown.

    uvicorn runs the lifespan shutdown only after every connection has finished, and a listen
    stream never finishes on its own; the app closes them gracefully from this hook. After a
    graceful shutdown uvicorn re-raises the signal it caught, which turns Ctrl-C into a
    `KeyboardInterrupt` traceback after the server has already stopped cleanly; the signals are
    kept in `stopped_by` instead, and `serve` exits 0 with one line saying why it stopped.
    """

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self._runtime = runtime
        self.stopped_by: list[int] = []

    def handle_exit(self, sig: int, frame: Any) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            loop.call_soon_threadsafe(self._runtime.begin_shutdown)
        else:
            self._runtime.begin_shutdown()
        super().handle_exit(sig, frame)

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        with super().capture_signals():
            try:
                yield
            finally:
                # Emptied before uvicorn's own exit path re-raises them (its private attribute, hence
                # the pinned minor version; without it, a stop still works, only less quietly).
                captured: list[int] = getattr(self, "_captured_signals", [])
                self.stopped_by = list(captured)
                captured.clear()


def run_server(
    app: Starlette,
    settings: Settings,
    sock: socket.socket | None = None,
    metrics_sock: socket.socket | None = None,
) -> list[int]:
    """Serve `app` with uvicorn (on `sock` when the caller bound it first), bounded: head size,
    request read time and connections come from `settings.http` (`uvicorn_options`), so a slow or
    endless client holds neither memory nor a connection for long. With `metrics_sock`, the app's
    `/metrics` is served there, on the same event loop, until the app's server stops. Returns the
    stop signals that ended it (none when it stopped for another reason).

    uvicorn gets no logging configuration of its own (`log_config=None`): its loggers go through
    the root handler in the commands' one format (`aml_mcp.cli.logs`).
    """
    configure_logging(settings.log_level)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,
        # uvicorn's hint says int, but the value only reaches asyncio.wait_for: a fraction counts.
        timeout_graceful_shutdown=cast(int, settings.shutdown_timeout_seconds),
        proxy_headers=False,
        server_header=False,
        **uvicorn_options(settings.http),
    )
    install_access_log_redaction()
    server = _Server(config, app.state.runtime)
    sockets = None if sock is None else [sock]
    if metrics_sock is None:
        server.run(sockets=sockets)
    else:
        run_beside(server, sockets, metrics_server(app.state.metrics_app, settings), metrics_sock)
    return server.stopped_by


def serve(args: argparse.Namespace) -> int:
    """`aml-mcp serve`."""
    settings = load_settings(
        args.config,
        host=args.host,
        port=args.port,
        data_dir=args.data_dir,
        database_url=args.database_url,
        public_url=args.public_url,
        role=args.role,
        metrics_host=args.metrics_host,
        metrics_port=args.metrics_port,
    )
    refusal = serve_refusal(settings)
    if refusal is not None:
        print(f"aml-mcp: {refusal}", file=sys.stderr)
        return EXIT_SETTINGS
    check_data_dir(settings)
    with hold_data_dir(settings.data_dir) as lock, _listening(settings) as (settings, sock, metrics_sock):
        lock.announce(settings.resource_url)
        _load_demo(settings)
        single_threaded_blas()
        app = build_app(settings)
        where = f"{settings.resource_url} (data in {settings.data_dir})"
        print(f"aml-mcp serving MCP at {where}", file=sys.stderr)
        print(serve_banner(settings, command_prefix()), file=sys.stderr)
        _announce_metrics(settings)
        stopped_by = run_server(app, settings, sock, metrics_sock)
    if stopped_by:
        names = ", ".join(signal.Signals(sig).name for sig in stopped_by)
        print(f"aml-mcp stopped ({names})", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _listening(settings: Settings) -> Iterator[tuple[Settings, socket.socket, socket.socket | None]]:
    """The sockets bound first, the public one and the metrics listener's when `metrics_port` asks
    for one (a busy port fails before the demo loads or the banner claims anything), with the
    settings naming the ports actually bound when port 0 asked for any."""
    sock = bind_listener(settings.host, settings.port)
    metrics_sock: socket.socket | None = None
    try:
        if settings.port == 0:
            settings = settings.model_copy(update={"port": int(sock.getsockname()[1])})
        if settings.metrics_port is not None:
            metrics_sock = bind_listener(settings.metrics_host, settings.metrics_port)
            if settings.metrics_port == 0:
                settings = settings.model_copy(update={"metrics_port": int(metrics_sock.getsockname()[1])})
        yield settings, sock, metrics_sock
    finally:
        sock.close()
        if metrics_sock is not None:
            metrics_sock.close()


def _announce_metrics(settings: Settings) -> None:
    url = metrics_url(settings)
    if url is not None:
        print(f"metrics (Prometheus text, not on the public port): {url}", file=sys.stderr)


def single_threaded_blas() -> None:
    """One BLAS thread for the whole process: a search's matrix-vector product is memory-bound and
    small, and on a 2-core machine serving concurrent requests a second BLAS thread only fights the
    other requests for the core (measured at 10k notes: 1.8 ms single-threaded, 15 ms with two
    threads under load). Parallelism comes from requests running side by side instead."""
    threadpool_limits(limits=1, user_api="blas")


def _load_demo(settings: Settings) -> None:
    """First start: fill an empty notes store with the demo banks, so there is something to search.

    It takes seconds to a minute on a small machine, so each bank is reported as it is written."""
    started = time.monotonic()

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    def bank_done(tenant: str, count: int, done: int, total: int) -> None:
        say(f"  {tenant}: {count} notes ({done}/{total} banks, {time.monotonic() - started:.1f} s)")

    if settings.aml.demo_notes_per_tenant == 0:
        return
    with open_notes(settings) as store:
        written = load_demo_if_empty(settings.aml, settings.ensure_data_dir(), say, bank_done, store=store)
    if written:
        banks = ", ".join(f"{tenant} ({count})" for tenant, count in written.items())
        say(f"loaded the demo corpus (notes per bank): {banks} in {time.monotonic() - started:.1f} s")
        if settings.aml.embedder is EmbedderKind.MINILM and settings.aml.reembed_in_background:
            minutes = max(1, round(sum(written.values()) / BACKGROUND_NOTES_PER_S / 60))
            say(
                "search is ready now (lexical, and dense with the static table); full dense quality "
                f"once the demo banks are re-embedded with the transformer in the background, about "
                f"{minutes} min on 2 cores (progress in the log)"
            )


def serve_banner(settings: Settings, command: str = "aml-mcp") -> str:
    """What `serve` prints once it listens: the URL, how to get a token (`command` is how the user
    runs `aml-mcp`, see `command_prefix`), the demo users and how to connect a client."""
    auth = settings.auth
    if not auth.enabled:
        return "authentication is OFF (loopback only): every request acts as the local principal"
    lines = [f"OAuth resource metadata: {resource_metadata_url(settings.resource_url)}"]
    if settings.lab_served:
        lines.append(
            f"the lab (web page: tools, tasks, authorization, audit): {page_url(settings.resource_url)}"
        )
    if auth.dev.enabled:
        issuer = dev_issuer(settings.resource_url, auth.dev.path)
        env, shared = _shared_state_args(settings)
        lines += [
            f"development authorization server: {issuer}",
            f"  demo users (password = user name): {_demo_users()}",
            "  MCP clients: connect to the endpoint above; its 401 leads them to discovery, login and"
            f" consent (pre-registered public client: {CLI_CLIENT_ID}). See docs/connecting-clients.md,"
            ' "Connect a client".',
            "  a token for scripts:",
            f"    {env}{command} token --data-dir {settings.data_dir}{shared} --subject alice"
            f' --tenant meridian-bank --scope "aml:read aml:draft"',
            "  client credentials:",
            f"    secret=$({env}{command} devauth client-secret --data-dir {settings.data_dir}{shared})",
            f'    curl -s -u "{SERVICE_CLIENT_ID}:$secret" -d grant_type=client_credentials -d scope=aml:read'
            f" -d resource={settings.resource_url} {issuer}/token",
        ]
    else:
        lines.append('  MCP clients: see docs/connecting-clients.md, "Connect a client".')
    # Never empty here: `serve_refusal` refuses settings that trust no authorization server.
    lines.append(f"trusted issuers: {', '.join(trusted_issuers(settings))}")
    return "\n".join(lines)


def _shared_state_args(settings: Settings) -> tuple[str, str]:
    """(environment prefix, options) that make a banner command use the shared database, where the
    development issuer's keys and secrets are when `database_url` is set (`shared_args`)."""
    return shared_state_args(settings.database_url, settings.database_schema)


def _demo_users() -> str:
    """`alice, carol (meridian-bank); bob, dave (harbour-trust)`, from the issuer's own user list."""
    banks: dict[str, list[str]] = {}
    for user in DEMO_USERS:
        banks.setdefault(user.tenant, []).append(user.username)
    return "; ".join(f"{', '.join(names)} ({tenant})" for tenant, names in banks.items())


def conformance_server(args: argparse.Namespace) -> int:
    """`aml-mcp conformance-server`: the fixture catalog, authentication off — or, with `--config`,
    authentication as that file (and the environment) says, to run the suite against a server that
    trusts a real identity provider (its requests must then carry that provider's token)."""
    from aml_mcp.conformance.fixtures import fixture_catalog

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="aml-mcp-conformance-"))
    if args.config is not None:
        settings = load_settings(args.config, port=args.port, data_dir=data_dir, **shared_options(args))
        settings = settings.model_copy(update={"host": "127.0.0.1", "log_level": "warning"})
    else:
        settings = Settings(
            host="127.0.0.1",
            port=args.port,
            data_dir=data_dir,
            log_level="warning",
            auth=AuthSettings(enabled=False),
            **shared_options(args),
        )
    refusal = serve_refusal(settings)
    if refusal is not None:
        print(f"aml-mcp: {refusal}", file=sys.stderr)
        return EXIT_SETTINGS
    check_data_dir(settings)
    with _listening(settings) as (settings, sock, metrics_sock):
        catalog: Catalog = fixture_catalog()
        app = build_app(settings, catalog=catalog)
        print(f"conformance fixture server at {settings.resource_url}", file=sys.stderr)
        _announce_metrics(settings)
        run_server(app, settings, sock, metrics_sock)
    return 0
