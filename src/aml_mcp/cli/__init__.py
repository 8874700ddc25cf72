"""The `aml-mcp` command: each group of subcommands lives in its own module of this package."""

from __future__ import annotations

import argparse
import logging
import os
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
