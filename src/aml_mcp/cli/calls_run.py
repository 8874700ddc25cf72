"""What `aml-mcp call` and `aml-mcp task` do once their arguments are parsed (`aml_mcp.cli.calls`).

Imported only when one of them runs: it imports the MCP SDK and the client, most of a second of CPU,
which `aml-mcp --help` or a server command must not pay.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp.shared.exceptions import MCPError

from aml_mcp.cli.answers import CommandLineAnswers, coerce, describe_unanswered, parse_answers
from aml_mcp.cli.calls import (
    CANCEL_TIMEOUT_SECONDS,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_TOOL_ERROR,
    TOKEN_ENV,
    default_token_cache,
)
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
        max_answer_bytes=DEFAULT_MAX_ANSWER_BYTES if args.max_answer_bytes is None else args.max_answer_bytes,
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
            outcome = await client.call_tool(args.tool, arguments, idempotency_key=args.idempotency_key)
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


def run(runner: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    """Run `run_call` or `run_task`: every way the exchange can end is one line and an exit status."""
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
    except BaseExceptionGroup as group:
        # A connection lost under a request ends the SDK's session from its transport's task group,
        # which raises the error wrapped: still the server out of reach (every retry spent), one line.
        lost, other = group.split((httpx2.HTTPError, OSError))
        if lost is None or other is not None:
            raise
        print(
            f"aml-mcp: cannot reach {terminal_text(args.url)}: {terminal_text(_first(group))}",
            file=sys.stderr,
        )
        return EXIT_PROTOCOL
    return code


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf = group.exceptions[0]
    return _first(leaf) if isinstance(leaf, BaseExceptionGroup) else leaf
