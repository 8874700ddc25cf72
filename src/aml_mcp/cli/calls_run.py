"""What `aml-mcp call` and `aml-mcp task` do once their arguments are parsed (`aml_mcp.cli.calls`).

Imported only when one of them runs: it imports the MCP SDK and the client, most of a second of CPU,
which `aml-mcp --help` or a server command must not pay.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types

from aml_mcp.cli.answers import CommandLineAnswers, coerce, describe_unanswered, parse_answers
from aml_mcp.cli.calls import (
    CANCEL_TIMEOUT_SECONDS,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROTOCOL,
    EXIT_TASK_ENDED,
    EXIT_TOOL_ERROR,
    TOKEN_ENV,
    default_token_cache,
)
from aml_mcp.cli.failures import EXIT_STDOUT_CLOSED, StdoutClosed, explain_call, report
from aml_mcp.cli.progress import Reporter, reporter_for
from aml_mcp.cli.serve import command_prefix
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
    _emit(terminal_json(body), out)
    return EXIT_TOOL_ERROR if result.is_error else EXIT_OK


def task_command(args: argparse.Namespace, action: str, task_id: str, *extra: str) -> str:
    """`aml-mcp task ACTION ID ...` as the user can paste it: spelled as they run `aml-mcp`
    (`./dev`, a venv path), with the `--url` and the sign-in options this command was given. A
    token given with `--token` is not repeated (a hint must not print a credential): it is named as
    `"$TOKEN"`, the README's variable; one from `AML_MCP_TOKEN` needs nothing."""
    words = [command_prefix(), "task", action, shlex.quote(task_id), "--url", shlex.quote(args.url)]
    if args.login:
        words.append("--login")
        if args.token_cache is not None:
            words += ["--token-cache", shlex.quote(str(args.token_cache))]
        if args.callback_port:
            words += ["--callback-port", str(args.callback_port)]
    elif args.token:
        words += ["--token", '"$TOKEN"']
    if args.poll:
        words.append("--poll")
    if args.max_answer_bytes is not None:
        words += ["--max-answer-bytes", str(args.max_answer_bytes)]
    return terminal_text(" ".join([*words, *extra]))


async def follow(
    handle: TaskHandle,
    answers: CommandLineAnswers | None,
    reporter: Reporter,
    out: TextIO,
    args: argparse.Namespace | None = None,
) -> int:
    """Wait for the task, showing its states; Ctrl-C (or SIGTERM) cancels it on the server. With the
    command's `args`, a task left waiting for input is followed by the commands that answer or
    cancel it, ready to paste."""
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
            outcome = await _wait(handle, reporter, out, args)
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


async def _wait(
    handle: TaskHandle, reporter: Reporter, out: TextIO, args: argparse.Namespace | None = None
) -> int:
    try:
        async for state in handle.statuses():
            reporter.show(state)
        return _print_result(handle.outcome(), out)
    except InputUnavailable as missing:
        reporter.close()
        print(describe_unanswered(missing.requests), file=sys.stderr)
        task_id = terminal_text(handle.task_id)
        if args is None:
            answer, cancel = "aml-mcp task answer ID --answer KEY=VALUE ...", "aml-mcp task cancel ID"
        else:
            answer = task_command(args, "answer", handle.task_id, "--answer", "KEY=VALUE", "...")
            cancel = task_command(args, "cancel", handle.task_id)
        print(
            f"task {task_id} is waiting for this input; answer it with\n  {answer}\nor cancel it with\n"
            f"  {cancel}",
            file=sys.stderr,
        )
        return EXIT_INPUT
    except AnswerRefused as refused:
        reporter.close()
        print(f"aml-mcp: {terminal_text(refused)}", file=sys.stderr)
        return EXIT_PROTOCOL
    except TaskFailed as failed:
        reporter.note(str(failed))
        _emit(terminal_json(failed.error), out)
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
            _emit(terminal_json(outcome.state.wire()), out)
            return EXIT_OK
        return await follow(outcome, answers, reporter_for(sys.stderr), out, args)


async def run_task(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    answers = CommandLineAnswers(
        parse_answers(getattr(args, "answer", None) or ()), interactive=sys.stdin.isatty()
    )
    async with _connected(args, answers) as client:
        handle = await client.task(args.task_id)
        if args.task_command == "cancel":
            return await _cancel(handle, out)
        if args.task_command == "answer":
            pending = handle.pending_inputs()
            given = {key: await answers(key, request) for key, request in pending.items()}
            if given:
                await handle.answer(given)
            state = await handle.refresh()
        else:
            state = handle.state
        _emit(terminal_json(state.wire()), out)
        return EXIT_OK


async def _cancel(handle: TaskHandle, out: TextIO) -> int:
    """`aml-mcp task cancel`: says what became of the task. One that had already ended (the
    server acknowledges a cancel of it and leaves it as it was) is said so, with its status and
    `EXIT_TASK_ENDED`, and is not printed: nothing was cancelled, and its result is `task get`'s.
    The cancel is sent whatever the state fetched first says, which may be stale already."""
    task_id = terminal_text(handle.task_id)
    before = handle.state
    await handle.cancel()
    after = await handle.refresh()
    if after.status == "cancelled" and before.status != "cancelled":
        print(f"task {task_id} cancelled", file=sys.stderr)
    elif after.terminal:
        print(
            f"task {task_id} had already ended ({terminal_text(after.status)}): nothing was cancelled",
            file=sys.stderr,
        )
        return EXIT_TASK_ENDED
    else:
        print(f"task {task_id}: cancel requested (it stops at its next step)", file=sys.stderr)
    _emit(terminal_json(after.wire()), out)
    return EXIT_OK


class _TerminalSafeFormatter(logging.Formatter):
    """The log formatter around another, whose output is made terminal safe: the SDK's log lines
    (a warning, a traceback) may quote what the server sent."""

    def __init__(self, inner: logging.Formatter | None) -> None:
        super().__init__()
        self._inner = inner or logging.Formatter()

    def format(self, record: logging.LogRecord) -> str:
        return terminal_text(self._inner.format(record), newlines=True)


class _ReportedElsewhere(logging.Filter):
    """Drops the SDK's log record of an error the command says in one line anyway (an answer the
    client refused, a sign-in that failed, a token the server refused): its traceback is what
    `--debug` is for. A record of any other error still shows."""

    def __init__(self, url: str, login: bool) -> None:
        super().__init__()
        self._url = url
        self._login = login

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if error is None:
            return True
        return (
            not isinstance(error, AnswerRefused)
            and explain_call(error, url=self._url, login=self._login) is None
        )


def _guard_logs(args: argparse.Namespace, debug: bool) -> None:
    for handler in logging.getLogger().handlers:
        if not debug and not any(isinstance(f, _ReportedElsewhere) for f in handler.filters):
            handler.addFilter(_ReportedElsewhere(args.url, bool(args.login)))
        if not isinstance(handler.formatter, _TerminalSafeFormatter):
            handler.setFormatter(_TerminalSafeFormatter(handler.formatter))


def run(runner: Callable[[argparse.Namespace], Awaitable[int]], args: argparse.Namespace) -> int:
    """Run `run_call` or `run_task`: every way the exchange can end is one line and an exit status
    (`aml_mcp.cli.failures`), with the traceback too under `--debug`."""
    debug = bool(getattr(args, "debug", False))
    # stderr is for the task's progress and the one line saying what went wrong: not the SDK's
    # request logs, nor its warnings (a refused redirect) that the line says again.
    for noisy in ("httpx", "httpx2", "mcp"):
        logging.getLogger(noisy).setLevel(logging.WARNING if debug else logging.ERROR)
    _guard_logs(args, debug)
    try:
        code: int = anyio.run(runner, args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except InputUnavailable as missing:
        print(describe_unanswered(missing.requests), file=sys.stderr)
        return EXIT_INPUT
    except Exception as error:
        failure = explain_call(error, url=args.url, login=bool(args.login))
        if failure is None:
            raise
        if failure.exit_code == EXIT_STDOUT_CLOSED:
            _drop_stdout()
        return report(failure, error, debug=debug)
    return code


def _emit(text: str, out: TextIO) -> None:
    """One line of the command's output on stdout; its reader gone (`| head`) is `StdoutClosed`,
    which the command does not blame on the server."""
    try:
        print(text, file=out, flush=True)
    except BrokenPipeError as closed:
        raise StdoutClosed(str(closed)) from closed


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of it at exit fails no more."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
