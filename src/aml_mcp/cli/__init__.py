"""The `aml-mcp` command: each group of subcommands lives in its own module of this package.

Each command module defines its arguments with the standard library alone and imports what its
work needs only when it runs, so the parser (and `--help`) is quick, and the base install (the
client, without the `server` extra) can run `call` and `task`. A server command run there ends
with one line saying what to install.

Every expected failure is one line on stderr and a documented exit status, arguments included
(argparse's usage dump becomes the one line naming the problem and where `--help` is); every
command takes `--debug`, which prints the traceback as well (`aml_mcp.cli.failures`).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

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
from aml_mcp.cli.failures import explain_settings, leaves
from aml_mcp.cli.logs import configure_logging
from aml_mcp.cli.serve import command_prefix
from aml_mcp.cli.startup import EXIT_SETTINGS, StartupError, describe

PRIVATE_UMASK = 0o077
"""Every file and directory a command creates is its owner's alone: the data directory holds every
bank's notes, SAR drafts and audit trail. The stores set their own modes too (for library use)."""

EXIT_INTERRUPTED = 130
"""Ctrl-C before a command finished starting: the shell's convention for SIGINT (128 + 2)."""

SERVER_EXTRA = "server"
"""The optional dependencies a server command needs (`[project.optional-dependencies]`)."""
SERVER_INSTALL = f"pip install 'aml-mcp[{SERVER_EXTRA}]'"


class _Parser(argparse.ArgumentParser):
    """A parser whose usage errors are one line (the subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.removeprefix("aml-mcp").strip()
        again = " ".join(filter(None, (command_prefix(), command, "--help")))
        self.exit(EXIT_SETTINGS, f"{self.prog}: {message} (`{again}` lists the options)\n")


DEBUG_HELP = "on a failure, print the traceback as well as the one line saying what went wrong"


def _with_debug(parser: argparse.ArgumentParser, *, default: object = argparse.SUPPRESS) -> None:
    """`--debug` on `parser` and on every subcommand under it: `aml-mcp --debug call ...` and
    `aml-mcp call ... --debug` alike (the subcommands' default must not undo the first)."""
    parser.add_argument("--debug", action="store_true", default=default, help=DEBUG_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                _with_debug(sub)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="aml-mcp", description="The aml-mcp server and its tools.")
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
    _with_debug(parser, default=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; an expected failure is one line on stderr and a non-zero exit, no traceback
    (unless `--debug`)."""
    args = _parser().parse_args(argv)
    configure_logging(logging.INFO)
    previous_umask = os.umask(PRIVATE_UMASK)
    try:
        result: int = args.run(args)
    except KeyboardInterrupt:
        # Ctrl-C before the server took over the signals (e.g. while the demo corpus loads).
        print("aml-mcp: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        refusal = _refusal(exc, args)
        if refusal is None:
            raise
        if args.debug:
            traceback.print_exception(exc)
        print(f"aml-mcp: {refusal}", file=sys.stderr)
        return refusal.exit_code
    finally:
        os.umask(previous_umask)  # for callers that run commands in-process (tests)
    return result


def _refusal(exc: Exception, args: argparse.Namespace) -> StartupError | None:
    """The one line and status for an expected failure of any command (`call` and `task` say their
    own, `aml_mcp.cli.calls_run`), or None for a bug. An exception group (a command's task group)
    is one when each of its exceptions is, and is said as its first."""
    found = [_one_refusal(leaf, args) for leaf in leaves(exc)]
    if not found or any(refusal is None for refusal in found):
        return None
    return found[0]


def _one_refusal(exc: BaseException, args: argparse.Namespace) -> StartupError | None:
    if isinstance(exc, ModuleNotFoundError):
        if not provided_by_server_extra(exc):
            return None
        return StartupError(f"{args.command} needs the server: {SERVER_INSTALL}", EXIT_SETTINGS)
    settings = explain_settings(exc, getattr(args, "config", None))
    if settings is not None:
        return StartupError(settings, EXIT_SETTINGS)
    if isinstance(exc, FileNotFoundError | ValueError):
        return StartupError(str(exc), EXIT_SETTINGS)
    return describe(exc) if isinstance(exc, Exception) else None


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
