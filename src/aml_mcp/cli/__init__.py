"""The `aml-mcp` command: each group of subcommands lives in its own module of this package."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from aml_mcp.cli import audit_tail, case_notes, dev_issuer, serve, tokens


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="aml-mcp", description="The aml-mcp server and its tools.")
    commands = parser.add_subparsers(dest="command", required=True)
    for group in (serve, case_notes, tokens, audit_tail, dev_issuer):
        group.add_commands(commands)
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
