"""The `aml-mcp` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from aml_mcp.aml.ingest import reembed_tenant, run_ingest
from aml_mcp.aml.note_store import NoteStore
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.wiring import load_demo_if_empty
from aml_mcp.app import Runtime, build_app
from aml_mcp.auth.redaction import install_access_log_redaction
from aml_mcp.auth.settings import AuthSettings
from aml_mcp.catalog import Catalog
from aml_mcp.cli.auth_commands import add_commands as add_auth_commands
from aml_mcp.cli.auth_commands import serve_banner, serve_refusal
from aml_mcp.config import Settings, load_settings


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


def run_server(app: Starlette, settings: Settings) -> None:
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        timeout_graceful_shutdown=int(settings.shutdown_timeout_seconds),
        proxy_headers=False,
        server_header=False,
    )
    install_access_log_redaction()
    _Server(config, app.state.runtime).run()


def _serve(args: argparse.Namespace) -> int:
    settings = load_settings(args.config, host=args.host, port=args.port, data_dir=args.data_dir)
    refusal = serve_refusal(settings)
    if refusal is not None:
        print(refusal, file=sys.stderr)
        return 2
    _load_demo(settings)
    app = build_app(settings)
    print(f"aml-mcp serving MCP at {settings.resource_url} (data in {settings.data_dir})", file=sys.stderr)
    print(serve_banner(settings), file=sys.stderr)
    run_server(app, settings)
    return 0


def _load_demo(settings: Settings) -> None:
    """First start: fill an empty notes store with the demo banks, so there is something to search."""
    written = load_demo_if_empty(
        settings.aml, settings.ensure_data_dir(), lambda message: print(message, file=sys.stderr)
    )
    if written:
        banks = ", ".join(f"{tenant} ({count})" for tenant, count in written.items())
        print(f"loaded the demo corpus (notes per bank): {banks}", file=sys.stderr)


def _ingest(args: argparse.Namespace) -> int:
    settings = load_settings(args.config, data_dir=args.data_dir)
    return run_ingest(args.file, args.tenant, settings.ensure_data_dir())


def _reembed(args: argparse.Namespace) -> int:
    """After an upgrade that ships a new embedding table: recompute stored vectors (never at start-up)."""
    settings = load_settings(args.config, data_dir=args.data_dir)
    embedder = StaticEmbedder.load()
    with NoteStore.open(settings.ensure_data_dir()) as store:
        for tenant in args.tenant or store.tenants():
            count = reembed_tenant(store, tenant, embedder)
            print(f"{tenant}: {count} note(s) re-embedded" if count else f"{tenant}: already current")
    return 0


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
    catalog: Catalog = fixture_catalog()
    app = build_app(settings, catalog=catalog)
    print(f"conformance fixture server at {settings.resource_url}", file=sys.stderr)
    run_server(app, settings)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aml-mcp", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve MCP at /mcp")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="where everything is persisted (default ./var)")
    serve.add_argument("--config", type=Path, help="a TOML settings file")
    serve.set_defaults(run=_serve)

    ingest = commands.add_parser(
        "ingest", help="load case notes (JSONL) for one tenant: all rows or none, bad rows listed"
    )
    ingest.add_argument("file", type=Path, help="JSON Lines, one note per line")
    ingest.add_argument("--tenant", required=True, help="the bank the notes belong to")
    ingest.add_argument("--data-dir", type=Path, help="where everything is persisted (default ./var)")
    ingest.add_argument("--config", type=Path, help="a TOML settings file")
    ingest.set_defaults(run=_ingest)

    reembed = commands.add_parser(
        "reembed", help="recompute note vectors made with an older embedding table (after an upgrade)"
    )
    reembed.add_argument("--tenant", action="append", help="only this bank (repeatable; default: all)")
    reembed.add_argument("--data-dir", type=Path, help="where everything is persisted (default ./var)")
    reembed.add_argument("--config", type=Path, help="a TOML settings file")
    reembed.set_defaults(run=_reembed)

    fixture = commands.add_parser(
        "conformance-server", help="serve the conformance fixtures on 127.0.0.1 (authentication off)"
    )
    fixture.add_argument("--port", type=int, default=3001)
    fixture.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    fixture.set_defaults(run=_conformance_server)
    add_auth_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        result: int = args.run(args)
    except (FileNotFoundError, ValueError) as exc:
        print(f"aml-mcp: {exc}", file=sys.stderr)
        return 2
    return result
