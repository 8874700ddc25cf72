"""`aml-mcp call` and `aml-mcp task get|cancel|answer`: call any MCP server's tools from a shell.

The result goes to stdout as JSON (the structured content when the tool returned some), everything
else to stderr, so scripts can pipe the one and people read the other. A call the server runs as a
task is followed until it ends, with a live bar on a terminal; Ctrl-C cancels the task on the server
(`tasks/cancel`) before exiting. `--no-wait` prints the task instead, for `aml-mcp task` later.
A call that gets no answer (a connection error, 502, 503) is sent again with the same idempotency
key, so it never creates a second task; `--idempotency-key` names the create, so a script that runs
the command again after losing its output gets the same task.

The server is not trusted: everything it wrote reaches stdout and stderr through
`aml_mcp.client.terminal` (JSON with its controls as `\\uXXXX` escapes, prose with them shown
escaped), answers are read up to `--max-answer-bytes`, and an answer the client refuses (too large,
compressed, about another task) ends the command with one line and exit status 6.

This module is the commands' arguments and exit statuses, and imports only the standard library:
what they do is `aml_mcp.cli.calls_run`, imported when one runs, so `aml-mcp call --help` costs
what argparse costs, not what the MCP SDK does.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

EXIT_OK = 0
EXIT_TOOL_ERROR = 1
"""The tool ran and returned `isError: true`."""
EXIT_USAGE = 2
EXIT_FAILED = 3
"""The task failed (a JSON-RPC error)."""
EXIT_CANCELLED = 4
"""The task was cancelled (by someone else)."""
EXIT_INPUT = 5
"""The server asked for input the command could not give."""
EXIT_PROTOCOL = 6
"""The server refused the request or could not be reached, or the client refused its answer."""
EXIT_TASK_ENDED = 7
"""`aml-mcp task cancel` of a task that had already ended: nothing was cancelled."""
EXIT_INTERRUPTED = 130
"""Ctrl-C: the task was cancelled on the server (128 + SIGINT, as shells expect)."""
CANCEL_TIMEOUT_SECONDS = 0.9
"""How long Ctrl-C waits for `tasks/cancel` to be acknowledged: the command exits within a second."""
DEFAULT_MAX_ANSWER_BYTES = 4 * 1024 * 1024
"""`aml_mcp.client.DEFAULT_MAX_ANSWER_BYTES`, for the help text only (a test keeps them equal): the
client is imported when a command runs, not when its arguments are parsed."""
TOKEN_ENV = "AML_MCP_TOKEN"  # noqa: S105 - the name of a variable, not a secret
"""A bearer token from the environment keeps it out of the process list (`ps`) and shell history."""


def default_token_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "aml-mcp" / "tokens.json"


def connection_options() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--url", required=True, help="the MCP endpoint, e.g. http://127.0.0.1:8000/mcp")
    who = parser.add_mutually_exclusive_group()
    who.add_argument("--token", help=f"a bearer token (or set {TOKEN_ENV}, which keeps it out of `ps`)")
    who.add_argument("--login", action="store_true", help="sign in with OAuth in the browser (tokens cached)")
    parser.add_argument(
        "--token-cache",
        type=Path,
        default=None,
        help="where --login keeps tokens (default ~/.cache/aml-mcp/tokens.json)",
    )
    parser.add_argument(
        "--callback-port",
        type=_port,
        default=0,
        metavar="PORT",
        help="the port on 127.0.0.1 where --login waits for the browser's redirect (default: any free one)",
    )
    parser.add_argument("--poll", action="store_true", help="wait for tasks by polling instead of listening")
    parser.add_argument(
        "--max-answer-bytes",
        type=_positive,
        default=None,
        metavar="N",
        help=f"read no answer of the server past N bytes (default {DEFAULT_MAX_ANSWER_BYTES})",
    )
    return parser


def _port(text: str) -> int:
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port")
    return port


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number")
    return value


def _call(args: argparse.Namespace) -> int:
    from aml_mcp.cli.calls_run import run, run_call

    return run(run_call, args)


def _task(args: argparse.Namespace) -> int:
    from aml_mcp.cli.calls_run import run, run_task

    return run(run_task, args)


def add_commands(commands: Any) -> None:
    call = commands.add_parser(
        "call", parents=[connection_options()], help="call a tool of any MCP server; print its result as JSON"
    )
    call.add_argument("tool", help="the tool's name")
    call.add_argument(
        "--arg", action="append", metavar="KEY=VALUE", help="one argument (read as its schema type)"
    )
    call.add_argument("--json", metavar="ARGS", help="the arguments as one JSON object")
    call.add_argument("--no-wait", action="store_true", help="print the task instead of waiting for it")
    call.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="name this create (1-255 visible ASCII characters): the same key sent again gets the same"
        " task (default: a fresh key, resent only by this command's own retries)",
    )
    call.add_argument(
        "--answer",
        action="append",
        metavar="KEY=VALUE",
        help="an answer to an input request (by key or field)",
    )
    call.set_defaults(run=_call)
    task = commands.add_parser("task", help="a task started with `call --no-wait`")
    task_commands = task.add_subparsers(dest="task_command", required=True)
    for name, text in (
        ("get", "print the task"),
        ("cancel", "cancel the task"),
        ("answer", "answer its input"),
    ):
        sub = task_commands.add_parser(name, parents=[connection_options()], help=text)
        sub.add_argument("task_id", metavar="ID", help="the task's id (after `--` if it begins with `-`)")
        if name == "answer":
            sub.add_argument("--answer", action="append", metavar="KEY=VALUE", required=True)
        sub.set_defaults(run=_task)
