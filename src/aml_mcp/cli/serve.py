"""`aml-mcp serve` and `aml-mcp conformance-server`, and the safety rules around serving.

`serve` refuses settings that would expose an unauthenticated server or the development issuer
beyond loopback, checks the data directory and binds its socket (so a damaged file or a busy port
is one line and an exit code before anything is loaded or announced), loads the demo corpus into
an empty notes store, prints how to get a token, and runs uvicorn on the bound socket with a stop
hook that ends listen streams before uvicorn waits for connections.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from threadpoolctl import threadpool_limits

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.search.choice import EmbedderKind
from aml_mcp.app import Runtime, build_app
from aml_mcp.auth.redaction import install_access_log_redaction
from aml_mcp.catalog import Catalog
from aml_mcp.cli.options import trusted_issuers
from aml_mcp.cli.startup import EXIT_SETTINGS, bind_listener, check_data_dir
from aml_mcp.config import AuthSettings, Settings, load_settings
from aml_mcp.devauth.users import DEMO_USERS
from aml_mcp.devauth.wiring import CLI_CLIENT_ID, SERVICE_CLIENT_ID, dev_issuer
from aml_mcp.http.protocol import uvicorn_options

TRANSFORMER_NOTES_PER_S = 12
"""Measured transformer ingest rate on 2 shared cores (benchmarks/search_quality.py): for the estimate."""


class _Server(uvicorn.Server):
    """Tells the app a stop signal arrived before uvicorn starts waiting for open requests.

    uvicorn runs the lifespan shutdown only after every connection has finished, and a listen
    stream never finishes on its own; the app closes them gracefully from this hook.
    """

    def __init__(self, config: uvicorn.Config, runtime: Runtime) -> None:
        super().__init__(config)
        self._runtime = runtime

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


def run_server(app: Starlette, settings: Settings, sock: socket.socket | None = None) -> None:
    """Serve `app` with uvicorn (on `sock` when the caller bound it first), bounded: head size,
    request read time and connections come from `settings.http` (`uvicorn_options`), so a slow or
    endless client holds neither memory nor a connection for long."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_seconds),
        proxy_headers=False,
        server_header=False,
        **uvicorn_options(settings.http),
    )
    install_access_log_redaction()
    _Server(config, app.state.runtime).run(sockets=None if sock is None else [sock])


def _serve(args: argparse.Namespace) -> int:
    settings = load_settings(args.config, host=args.host, port=args.port, data_dir=args.data_dir)
    refusal = serve_refusal(settings)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return EXIT_SETTINGS
    check_data_dir(settings)
    with _listening(settings) as (settings, sock):
        _load_demo(settings)
        single_threaded_blas()
        app = build_app(settings)
        where = f"{settings.resource_url} (data in {settings.data_dir})"
        print(f"aml-mcp serving MCP at {where}", file=sys.stderr)
        print(serve_banner(settings), file=sys.stderr)
        run_server(app, settings, sock)
    return 0


@contextlib.contextmanager
def _listening(settings: Settings) -> Iterator[tuple[Settings, socket.socket]]:
    """The socket bound first (a busy port fails before the demo loads or the banner claims
    anything), with the settings naming the port actually bound when port 0 asked for any."""
    sock = bind_listener(settings.host, settings.port)
    try:
        if settings.port == 0:
            settings = settings.model_copy(update={"port": int(sock.getsockname()[1])})
        yield settings, sock
    finally:
        sock.close()


def single_threaded_blas() -> None:
    """One BLAS thread for the whole process: a search's matrix-vector product is memory-bound and
    small, and on a 2-core machine serving concurrent requests a second BLAS thread only fights the
    other requests for the core (measured at 10k notes: 1.8 ms single-threaded, 15 ms with two
    threads under load). Parallelism comes from requests running side by side instead."""
    threadpool_limits(limits=1, user_api="blas")


def _load_demo(settings: Settings) -> None:
    """First start: fill an empty notes store with the demo banks, so there is something to search."""
    written = load_demo_if_empty(
        settings.aml, settings.ensure_data_dir(), lambda message: print(message, file=sys.stderr)
    )
    if written:
        banks = ", ".join(f"{tenant} ({count})" for tenant, count in written.items())
        print(f"loaded the demo corpus (notes per bank): {banks}", file=sys.stderr)
        if settings.aml.embedder is EmbedderKind.MINILM and settings.aml.reembed_in_background:
            minutes = max(1, round(sum(written.values()) / TRANSFORMER_NOTES_PER_S / 60))
            print(
                "search is ready now (lexical, and dense with the static table); full dense quality "
                f"once the demo banks are re-embedded with the transformer in the background, about "
                f"{minutes} min on 2 cores (progress on /readyz and in the log)",
                file=sys.stderr,
            )


def serve_refusal(settings: Settings) -> str | None:
    """Why `serve` must not start with these settings (None: it may). Fails closed on exposure."""
    if settings.binds_loopback:
        return None
    if not settings.auth.enabled:
        return (
            f"refusing to serve on {settings.host}: authentication is off, so only loopback is allowed "
            "(turn AML_MCP_AUTH__ENABLED back on)"
        )
    if settings.auth.dev.enabled:
        return (
            f"refusing to serve on {settings.host}: the development authorization server (demo users, "
            "open registration) is for loopback only; set AML_MCP_AUTH__DEV__ENABLED=false and configure "
            "a trusted issuer in AML_MCP_AUTH__ISSUERS"
        )
    return None


def serve_banner(settings: Settings) -> str:
    """What `serve` prints about authentication: where the issuer is and how to get a token."""
    auth = settings.auth
    if not auth.enabled:
        return "authentication is OFF (loopback only): every request acts as the local principal"
    lines = [f"OAuth resource: {settings.resource_url} (metadata: /.well-known/oauth-protected-resource/mcp)"]
    trusted = trusted_issuers(settings)
    if auth.dev.enabled:
        issuer = dev_issuer(settings.resource_url, auth.dev.path)
        lines += [
            f"development authorization server: {issuer}",
            f"  demo users (password = user name): {_demo_users()}",
            "  MCP clients: connect to the URL above; the 401 leads them to discovery, login and consent.",
            "  a token for scripts:",
            f"    aml-mcp token --data-dir {settings.data_dir} --port {settings.port} --subject alice"
            f' --tenant meridian-bank --client {CLI_CLIENT_ID} --scope "aml:read aml:draft"',
            "  client credentials:",
            f"    secret=$(aml-mcp devauth client-secret --data-dir {settings.data_dir})",
            f'    curl -s -u "{SERVICE_CLIENT_ID}:$secret" -d grant_type=client_credentials -d scope=aml:read'
            f" -d resource={settings.resource_url} {issuer}/token",
        ]
    lines.append(f"trusted issuers: {', '.join(trusted) or '(none: every request will be refused)'}")
    return "\n".join(lines)


def _demo_users() -> str:
    """`alice, carol (meridian-bank); bob, dave (harbour-trust)`, from the issuer's own user list."""
    banks: dict[str, list[str]] = {}
    for user in DEMO_USERS:
        banks.setdefault(user.tenant, []).append(user.username)
    return "; ".join(f"{', '.join(names)} ({tenant})" for tenant, names in banks.items())


def _conformance_server(args: argparse.Namespace) -> int:
    from aml_mcp.conformance.fixtures import fixture_catalog

    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="aml-mcp-conformance-"))
    settings = Settings(
        host="127.0.0.1",
        port=args.port,
        data_dir=data_dir,
        log_level="warning",
        auth=AuthSettings(enabled=False),
    )
    check_data_dir(settings)
    with _listening(settings) as (settings, sock):
        catalog: Catalog = fixture_catalog()
        app = build_app(settings, catalog=catalog)
        print(f"conformance fixture server at {settings.resource_url}", file=sys.stderr)
        run_server(app, settings, sock)
    return 0


def add_commands(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve MCP at /mcp")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="where everything is persisted (default ./var)")
    serve.add_argument("--config", type=Path, help="a TOML settings file")
    serve.set_defaults(run=_serve)

    fixture = commands.add_parser(
        "conformance-server", help="serve the conformance fixtures on 127.0.0.1 (authentication off)"
    )
    fixture.add_argument("--port", type=int, default=3001)
    fixture.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    fixture.set_defaults(run=_conformance_server)
