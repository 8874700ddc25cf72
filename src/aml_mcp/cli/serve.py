"""`aml-mcp serve` and `aml-mcp conformance-server`, and the safety rules around serving.

`serve` refuses settings that would expose an unauthenticated server, the development issuer or
the lab's simulation beyond loopback (a non-loopback `--host`, or a `--public-url` a proxy serves),
checks the data directory and binds its sockets (so a damaged file or a busy port is one line and
an exit code before anything is loaded or announced), loads the demo corpus into an empty notes
store, prints how to get a token, and runs uvicorn on the bound socket with a stop hook that ends
listen streams before uvicorn waits for connections; with `--metrics-port`, a second uvicorn
serves `/metrics` beside it (`metrics_listener`).

This module is the commands' arguments and the rules that need no server; what they do is
`aml_mcp.cli.serve_run`, imported when one runs, so parsing them imports nothing of the server.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aml_mcp.config import Settings


def _serve(args: argparse.Namespace) -> int:
    from aml_mcp.cli.serve_run import serve

    return serve(args)


def _conformance_server(args: argparse.Namespace) -> int:
    from aml_mcp.cli.serve_run import conformance_server

    return conformance_server(args)


def metrics_url(settings: Settings) -> str | None:
    """Where the metrics listener answers (None: no listener)."""
    if settings.metrics_port is None:
        return None
    host = f"[{settings.metrics_host}]" if ":" in settings.metrics_host else settings.metrics_host
    return f"http://{host}:{settings.metrics_port}/metrics"


def serve_refusal(settings: Settings) -> str | None:
    """Why `serve` must not start with these settings (None: it may), in one line naming every
    setting to change. Fails closed on exposure, and before anything is loaded on settings under
    which no token could ever be accepted.

    Exposure is judged on the bind host *and* the public URL: a replica bound to loopback behind a
    proxy with `--public-url https://aml.bank.example/mcp` serves whoever reaches the proxy, so
    what is for loopback only (authentication off; the development authorization server, which
    signs in its demo users and registers any client; the lab's simulation, which signs tokens
    with it) is refused for either.
    """
    auth = settings.auth
    trusts_another = bool(auth.issuers) or auth.introspection is not None
    if auth.enabled and not (auth.dev.enabled or trusts_another):
        return (
            "refusing to serve: authentication is on but no authorization server is trusted "
            "(configure AML_MCP_AUTH__ISSUERS, or turn AML_MCP_AUTH__DEV__ENABLED back on for loopback)"
        )
    where = settings.exposed_at
    if where is None:
        return None
    loopback_only: list[str] = []
    changes: list[str] = []
    if not auth.enabled:
        loopback_only.append("serving with authentication off")
        changes.append("AML_MCP_AUTH__ENABLED=true")
    elif auth.dev.enabled:
        loopback_only.append("the development authorization server (demo users, open registration)")
    if auth.dev.enabled:
        changes.append("AML_MCP_AUTH__DEV__ENABLED=false")  # named with auth off too: it starts with auth
    if settings.simulation_served:
        loopback_only.append("the lab's authorization simulation")
        changes.append("AML_MCP_LAB__SIMULATION=false")
    if not loopback_only:
        return None
    place = f"on {settings.host}" if not settings.binds_loopback else f"for the public URL {where}"
    verb = "is" if len(loopback_only) == 1 else "are"
    issuer = "" if trusts_another else ", and configure a trusted issuer in AML_MCP_AUTH__ISSUERS"
    return (
        f"refusing to serve {place}: {' and '.join(loopback_only)} {verb} for loopback only; "
        f"set {' and '.join(changes)}{issuer}"
    )


def command_prefix(environ: Mapping[str, str] = os.environ, argv0: str = sys.argv[0]) -> str:
    """How the user can run another `aml-mcp` command, as they would type it.

    `./dev` says so in `AML_MCP_COMMAND` (its commands run from the clone with no activated
    environment, where a bare `aml-mcp` is "command not found"). Otherwise: `aml-mcp` when that
    name on PATH is this very program, else this program's full path (e.g. `.venv/bin/aml-mcp`).
    """
    given = environ.get("AML_MCP_COMMAND", "").strip()
    if given:
        return given
    program = Path(argv0)
    if program.name == "aml-mcp":
        found = shutil.which("aml-mcp", path=environ.get("PATH"))
        if found is not None and Path(found).resolve() == program.resolve():
            return "aml-mcp"
        return str(program.resolve())
    return f"{Path(sys.executable)} -m aml_mcp"


def shared_options(args: argparse.Namespace) -> dict[str, Any]:
    """`--database-url`, `--public-url`, `--role` and the metrics listener's options as settings,
    only those given (the rest come from the environment, e.g. `AML_MCP_DATABASE_URL`)."""
    given = {
        "database_url": args.database_url,
        "public_url": args.public_url,
        "role": args.role,
        "metrics_host": args.metrics_host,
        "metrics_port": args.metrics_port,
    }
    return {key: value for key, value in given.items() if value is not None}


def add_metrics_options(parser: argparse.ArgumentParser) -> None:
    """`--metrics-host` and `--metrics-port`: the metrics listener (serve, worker, conformance-server)."""
    parser.add_argument(
        "--metrics-host",
        help="interface of the metrics listener (default 127.0.0.1: keep it off the public side)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        help="serve /metrics on this port, beside the public one (default: none; 0: any free port)",
    )


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--database-url",
        help="shared PostgreSQL database (postgresql://...): several processes share the tasks",
    )
    parser.add_argument("--public-url", help="the MCP endpoint URL clients use (e.g. the load balancer's)")
    parser.add_argument(
        "--role",
        choices=("all", "api"),
        help="all: answer requests and run task bodies (default); api: answer only, workers run the tasks",
    )
    add_metrics_options(parser)


def add_commands(commands: Any) -> None:
    serve = commands.add_parser("serve", help="serve MCP at /mcp")
    serve.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (default 8000)")
    serve.add_argument("--data-dir", type=Path, help="where everything is persisted (default ./var)")
    serve.add_argument("--config", type=Path, help="a TOML settings file")
    _add_cluster_options(serve)
    serve.set_defaults(run=_serve)

    fixture = commands.add_parser(
        "conformance-server", help="serve the conformance fixtures on 127.0.0.1 (authentication off)"
    )
    fixture.add_argument("--port", type=int, default=3001)
    fixture.add_argument("--data-dir", type=Path, help="default: a fresh temporary directory")
    fixture.add_argument(
        "--config",
        type=Path,
        help="a TOML settings file whose [auth] applies (e.g. your identity provider trusted); "
        "without one, authentication is off",
    )
    _add_cluster_options(fixture)
    fixture.set_defaults(run=_conformance_server)
