"""`aml-mcp call` and `aml-mcp task get|cancel|answer`: call any MCP server's tools from a shell.

The result goes to stdout as JSON (the structured content when the tool returned some), everything
else to stderr, so scripts can pipe the one and people read the other. A call the server runs as a
task is followed until it ends, with a live bar on a terminal; Ctrl-C cancels the task on the server
(`tasks/cancel`) before exiting. `--no-wait` prints the task instead, for `aml-mcp task` later.

The server is not trusted: everything it wrote reaches stdout and stderr through
`aml_mcp.client.terminal` (JSON with its controls as `\\uXXXX` escapes, prose with them shown
escaped), answers are read up to `--max-answer-bytes`, and an answer the client refuses (too large,
compressed, about another task) ends the command with one line and exit status 6.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError

from aml_mcp.cli.answers import CommandLineAnswers, coerce, describe_unanswered, parse_answers
from aml_mcp.cli.progress import Reporter, reporter_for
from aml_mcp.client import (
    DEFAULT_MAX_ANSWER_BYTES,
    AnswerRefused,
    BearerAuth,
    InputUnavailable,
    McpClient,
    TaskCancelled,
    TaskFailed,
    TaskHandle,
)
from aml_mcp.client.oauth import FileTokenStorage, LoopbackCatcher, oauth_provider
from aml_mcp.client.terminal import terminal_json, terminal_text

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
EXIT_INTERRUPTED = 130
"""Ctrl-C: the task was cancelled on the server (128 + SIGINT, as shells expect)."""
CANCEL_TIMEOUT_SECONDS = 0.9
"""How long Ctrl-C waits for `tasks/cancel` to be acknowledged: the command exits within a second."""
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
        default=DEFAULT_MAX_ANSWER_BYTES,
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


def _auth(args: argparse.Namespace) -> httpx2.Auth | None:
    if args.login:
        storage = FileTokenStorage(args.token_cache or default_token_cache(), args.url)
        try:
            catcher = LoopbackCatcher(port=args.callback_port)
        except OSError as error:
            raise ValueError(f"--callback-port: {error.strerror}") from error  # one line, exit 2
        return oauth_provider(args.url, storage=storage, catcher=catcher, client_name="aml-mcp CLI")
    token = args.token or os.environ.get(TOKEN_ENV)
    return BearerAuth(token) if token else None


@asynccontextmanager
async def _connected(
    args: argparse.Namespace, answers: CommandLineAnswers | None
) -> AsyncIterator[McpClient]:
    async with McpClient(
        args.url,
        auth=_auth(args),
        on_input=answers,
        listen=not args.poll,
        max_answer_bytes=args.max_answer_bytes,
    ) as client:
        yield client


async def _arguments(client: McpClient, args: argparse.Namespace) -> dict[str, Any]:
    """`--json` first, then each `--arg key=value` read as the tool's schema types it."""
    arguments: dict[str, Any] = {}
    if args.json:
        loaded = json.loads(args.json)
        if not isinstance(loaded, dict):
            raise ValueError("--json takes a JSON object of arguments")
        arguments.update(loaded)
    if args.arg:
        tools = {tool.name: tool for tool in await client.list_tools()}
        tool = tools.get(args.tool)
        properties: Mapping[str, Any] = ((tool.input_schema if tool else {}) or {}).get("properties") or {}
        for pair in args.arg:
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"--arg takes KEY=VALUE, not {pair!r}")
            arguments[key] = coerce(value, properties.get(key) or {"type": "json"})
    return arguments


def _print_result(result: types.CallToolResult, out: TextIO) -> int:
    if result.structured_content is not None:
        body: Any = result.structured_content
    else:
        body = result.model_dump(by_alias=True, mode="json", exclude_none=True, exclude={"meta"})
    print(terminal_json(body), file=out, flush=True)
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


async def follow(
    handle: TaskHandle, answers: CommandLineAnswers | None, reporter: Reporter, out: TextIO
) -> int:
    """Wait for the task, showing its states; Ctrl-C (or SIGTERM) cancels it on the server."""
    if answers is not None:
        answers.before_prompt = reporter.pause  # the prompt takes the terminal from the bar
        answers.after_prompt = reporter.resume
    interrupted = False
    outcome: int | None = None
    async with anyio.create_task_group() as group:

        async def on_signal() -> None:
            nonlocal interrupted
            with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
                async for _ in signals:
                    interrupted = True
                    group.cancel_scope.cancel()
                    return

        async def wait() -> None:
            nonlocal outcome
            outcome = await _wait(handle, reporter, out)
            group.cancel_scope.cancel()

        group.start_soon(on_signal)
        group.start_soon(wait)
    reporter.close()
    if interrupted:
        with anyio.move_on_after(CANCEL_TIMEOUT_SECONDS) as timer:
            await handle.cancel()
        said = "cancel requested" if not timer.cancelled_caught else "cancel sent (no acknowledgement yet)"
        print(f"interrupted: task {terminal_text(handle.task_id)} {said}", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED
    assert outcome is not None
    return outcome


async def _wait(handle: TaskHandle, reporter: Reporter, out: TextIO) -> int:
    try:
        async for state in handle.statuses():
            reporter.show(state)
        return _print_result(handle.outcome(), out)
    except InputUnavailable as missing:
        reporter.close()
        print(describe_unanswered(missing.requests), file=sys.stderr)
        task_id = terminal_text(handle.task_id)
        print(
            f"task {task_id} is waiting for this input: `aml-mcp task answer {task_id} "
            "--answer KEY=VALUE ...` or `aml-mcp task cancel ...`",
            file=sys.stderr,
        )
        return EXIT_INPUT
    except AnswerRefused as refused:
        reporter.close()
        print(f"aml-mcp: {terminal_text(refused)}", file=sys.stderr)
        return EXIT_PROTOCOL
    except TaskFailed as failed:
        reporter.note(str(failed))
        print(terminal_json(failed.error), file=out)
        return EXIT_FAILED
    except TaskCancelled as cancelled:
        reporter.note(str(cancelled))
        return EXIT_CANCELLED


async def run_call(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    answers = CommandLineAnswers(parse_answers(args.answer or ()), interactive=sys.stdin.isatty())
    async with _connected(args, answers) as client:
        arguments = await _arguments(client, args)
        try:
            outcome = await client.call_tool(args.tool, arguments)
        except InputUnavailable as missing:
            print(describe_unanswered(missing.requests), file=sys.stderr)
            return EXIT_INPUT
        if isinstance(outcome, types.CallToolResult):
            return _print_result(outcome, out)
        if args.no_wait:
            print(terminal_json(outcome.state.wire()), file=out, flush=True)
            return EXIT_OK
        return await follow(outcome, answers, reporter_for(sys.stderr), out)


async def run_task(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    answers = CommandLineAnswers(
        parse_answers(getattr(args, "answer", None) or ()), interactive=sys.stdin.isatty()
    )
    async with _connected(args, answers) as client:
        handle = await client.task(args.task_id)
        if args.task_command == "cancel":
            await handle.cancel()
            print(f"task {terminal_text(args.task_id)}: cancel requested", file=sys.stderr)
            state = await handle.refresh()
        elif args.task_command == "answer":
            pending = handle.pending_inputs()
            given = {key: await answers(key, request) for key, request in pending.items()}
            if given:
                await handle.answer(given)
            state = await handle.refresh()
        else:
            state = handle.state
        print(terminal_json(state.wire()), file=out, flush=True)
        return EXIT_OK


class _TerminalSafeFormatter(logging.Formatter):
    """The log formatter around another, whose output is made terminal safe: the SDK's log lines
    (a warning, a traceback) may quote what the server sent."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self._inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(self._inner.format(record), newlines=True)


def _reported_elsewhere(record: logging.LogRecord) -> bool:
    """Drops the SDK's traceback for an answer the client refused: the command says it in one line."""
    return not (record.exc_info and isinstance(record.exc_info[1], AnswerRefused))


def _guard_logs() -> None:
    for handler in logging.getLogger().handlers:
        handler.addFilter(_reported_elsewhere)
        if not isinstance(handler.formatter, _TerminalSafeFormatter):
            handler.setFormatter(_TerminalSafeFormatter(handler.formatter))


def _run(runner: Any) -> Any:
    def run(args: argparse.Namespace) -> int:
        for noisy in ("httpx", "httpx2", "mcp"):  # stderr is for the task's progress, not request logs
            logging.getLogger(noisy).setLevel(logging.WARNING)
        _guard_logs()
        try:
            code: int = anyio.run(runner, args)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except InputUnavailable as missing:
            print(describe_unanswered(missing.requests), file=sys.stderr)
            return EXIT_INPUT
        except AnswerRefused as refused:
            print(f"aml-mcp: {terminal_text(refused)}", file=sys.stderr)
            return EXIT_PROTOCOL
        except MCPError as error:
            print(f"aml-mcp: the server refused: {terminal_text(error)} (code {error.code})", file=sys.stderr)
            return EXIT_PROTOCOL
        except (httpx2.HTTPError, OSError) as error:
            print(f"aml-mcp: cannot reach {terminal_text(args.url)}: {terminal_text(error)}", file=sys.stderr)
            return EXIT_PROTOCOL
        return code

    return run


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
        "--answer",
        action="append",
        metavar="KEY=VALUE",
        help="an answer to an input request (by key or field)",
    )
    call.set_defaults(run=_run(run_call))
    task = commands.add_parser("task", help="a task started with `call --no-wait`")
    task_commands = task.add_subparsers(dest="task_command", required=True)
    for name, text in (
        ("get", "print the task"),
        ("cancel", "cancel the task"),
        ("answer", "answer its input"),
    ):
        sub = task_commands.add_parser(name, parents=[connection_options()], help=text)
        sub.add_argument("task_id", metavar="ID")
        if name == "answer":
            sub.add_argument("--answer", action="append", metavar="KEY=VALUE", required=True)
        sub.set_defaults(run=_run(run_task))
