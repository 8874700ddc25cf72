"""The `aml-mcp` command: each group of subcommands lives in its own module of this package.

Each command module defines its arguments with the standard library alone and imports what its
work needs only when it runs, so the parser (and `--help`) is quick, and the base install (the
client, without the `server` extra) can run `call` and `task`. A server command run there ends
with one line saying what to install.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from collections.abc import Sequence

from aml_mcp.cli import (
    audit_tail,
    calls,
    case_notes,
    cluster,
    conformance_client,
    dev_issuer,
    serve,
    tokens,
    worker,
)
from aml_mcp.cli.logs import configure_logging
from aml_mcp.cli.startup import EXIT_SETTINGS, describe

PRIVATE_UMASK = 0o077
"""Every file and directory a command creates is its owner's alone: the data directory holds every
bank's notes, SAR drafts and audit trail. The stores set their own modes too (for library use)."""

EXIT_INTERRUPTED = 130
"""Ctrl-C before a command finished starting: the shell's convention for SIGINT (128 + 2)."""

SERVER_EXTRA = "server"
"""The optional dependencies a server command needs (`[project.optional-dependencies]`)."""
SERVER_INSTALL = f"pip install 'aml-mcp[{SERVER_EXTRA}]'"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aml-mcp", description="The aml-mcp server and its tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in (
        serve,
        worker,
        cluster,
        case_notes,
        tokens,
        audit_tail,
        dev_issuer,
        calls,
        conformance_client,
    ):
        group.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; a start-up failure is one line on stderr and a non-zero exit, no traceback."""
    args = _parser().parse_args(argv)
    configure_logging(logging.INFO)
    previous_umask = os.umask(PRIVATE_UMASK)
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:
        # Ctrl-C before the server took over the signals (e.g. while the demo corpus loads).
        print("aml-mcp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ModuleNotFoundError as exc:
        if not provided_by_server_extra(exc):
            raise
        print(f"aml-mcp: {args.command} needs the server: {SERVER_INSTALL}", file=sys.stderr)
        return EXIT_SETTINGS
    except (FileNotFoundError, ValueError) as exc:
        print(f"aml-mcp: {exc}", file=sys.stderr)
        return EXIT_SETTINGS
    except Exception as exc:
        refusal = describe(exc)
        if refusal is None:
            raise
        print(f"aml-mcp: {refusal}", file=sys.stderr)
        return refusal.exit_code
    finally:
        os.umask(previous_umask)  # for callers that run commands in-process (tests)
    return result


def provided_by_server_extra(exc: ModuleNotFoundError) -> bool:
    """Whether the module `exc` did not find is one the `server` extra installs, as this
    installation's own metadata declares the extra (so the rule cannot drift from pyproject.toml);
    any other missing module (a bank's drafter, a broken install) is not explained by the extra."""
    import importlib.metadata  # here: only a failed command pays for reading the metadata

    missing = (exc.name or "").partition(".")[0]
    try:
        requirements = importlib.metadata.requires("aml-mcp") or []
    except importlib.metadata.PackageNotFoundError:
        return False
    in_extra = re.compile(rf"""\bextra\s*==\s*["']{SERVER_EXTRA}["']""")
    extra = {_name(req) for req in requirements if in_extra.search(req.partition(";")[2])}
    return bool(missing) and _name(missing) in extra


def _name(requirement: str) -> str:
    """A requirement's (or a module's) name as package indexes compare names: case and `-_.` aside."""
    name = re.match(r"\s*([A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "_", name.group(1) if name else "").lower()
