"""`aml-mcp call` and `aml-mcp task` against a hostile server (findings N5 and N7 of the second
security review): the real command in a child process, a real aml-mcp server behind a real proxy
that rewrites its answers over HTTP.

- N5: escape sequences, C1 controls, bidi overrides and rich markup the server writes into status
  messages, tool text, elicitation prompts and error messages reach neither stderr nor stdout raw,
  on a pipe or on a terminal (the live bar and the prompt);
- N7: a huge answer is cut off early, with bounded memory, one line and exit status 6; an answer
  about another task than the one asked for is refused, and the other task is never printed.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from aml_mcp.aml.notes.model import CaseNote
from tests.aml.tools.aml_client import A, load_demo
from tests.client.hostile_server import (
    MIB,
    OTHER_CANARY,
    OTHER_TASK,
    POISON,
    RAW_SEQUENCES,
    HostileProxy,
    hostile_proxy,
)
from tests.support.aml_live import (
    ALL_SCOPES,
    case_needing_dob,
    complete_case,
    demo_cases_by_bank,
    live_aml_server,
)
from tests.support.oauth import SecuredServer, TestIssuer

Cases = dict[str, list[CaseNote]]
EXIT_PROTOCOL = 6
SGR_BLINK = re.compile(rb"\x1b\[(?:[0-9;]*;)?5(?:;[0-9;]*)?m")
"""An SGR sequence that turns blinking on: what rich writes for `[blink]` markup."""


@dataclass
class Hostile:
    server: SecuredServer
    proxy: HostileProxy
    url: str
    """The proxy's MCP endpoint: what the command is pointed at."""


@pytest.fixture(scope="module")
def cases() -> Cases:
    return demo_cases_by_bank()[A]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[Hostile]:
    demo = tmp_path_factory.mktemp("hostile-demo")
    load_demo(demo)
    with (
        live_aml_server(tmp_path_factory.mktemp("hostile-aml"), issuer, demo) as server,
        hostile_proxy(server.url) as (proxy, proxy_url),
    ):
        yield Hostile(server, proxy, f"{proxy_url}/mcp")


@pytest.fixture
def proxy(hostile: Hostile) -> Iterator[HostileProxy]:
    yield hostile.proxy
    hostile.proxy.mode = "pass"


def _env(hostile: Hostile) -> dict[str, str]:
    token = hostile.server.mint(tenant=A, scope=ALL_SCOPES, subject="carol", client_id="cli")
    return {**os.environ, "AML_MCP_TOKEN": token, "COLUMNS": "200"}


def _cli(hostile: Hostile, *args: str) -> list[str]:
    return [sys.executable, "-m", "aml_mcp", *args, "--url", hostile.url]


def _run(hostile: Hostile, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(hostile, *args),
        env=_env(hostile),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _assert_nothing_raw(output: str) -> None:
    for raw in RAW_SEQUENCES:
        assert raw not in output, f"{raw!r} reached the output raw: {output[-3000:]!r}"


def _started_task(hostile: Hostile, cases: Cases) -> str:
    arguments = json.dumps({"case_ids": [complete_case(cases)]})
    started = _run(hostile, "call", "draft_sar_batch", "--json", arguments, "--no-wait")
    assert started.returncode == 0, started.stderr
    task_id: str = json.loads(started.stdout)["taskId"]
    return task_id


# N5 ------------------------------------------------------------------------------------------------


def test_progress_and_result_from_a_hostile_server_are_escaped(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    proxy.mode = "esc"
    done = _run(
        hostile, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [complete_case(cases)]})
    )
    assert done.returncode == 0, done.stderr
    # stderr: the plain progress lines show the server's status messages, every control escaped.
    _assert_nothing_raw(done.stderr)
    assert "\\x1b]0;PWNED-TITLE\\x07\\x1b[2J" in done.stderr and "\\x9b31m\\u202eevil" in done.stderr
    assert all(line.startswith("task ") for line in done.stderr.splitlines()), done.stderr
    # stdout: the same JSON value, with the controls as JSON escapes instead of raw characters.
    _assert_nothing_raw(done.stdout)
    assert "\\u009b31m" in done.stdout and "\\u202eevil" in done.stdout
    texts = [case["text"] for case in json.loads(done.stdout)["cases"]]
    assert texts and all(text.endswith(POISON) for text in texts)


def test_input_requests_of_a_hostile_server_are_listed_escaped(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    proxy.mode = "esc"
    done = _run(
        hostile, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case_needing_dob(cases)]})
    )
    assert done.returncode == 5, done.stderr
    _assert_nothing_raw(done.stderr)
    assert "date of birth" in done.stderr and "\\x1b]0;PWNED-TITLE" in done.stderr


def test_an_error_message_of_a_hostile_server_is_escaped(hostile: Hostile, proxy: HostileProxy) -> None:
    proxy.mode = "esc"
    done = _run(hostile, "task", "get", "no-such-task")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    _assert_nothing_raw(done.stderr)
    assert done.stderr.startswith("aml-mcp: the server refused: ") and "\\x1b[2J" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def _read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    """What the terminal shows until `wanted` has appeared (or the child closed it)."""
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"{wanted!r} never appeared; got {seen[-3000:]!r}")
        if not select.select([fd], [], [], left)[0]:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal
            return seen
        if not chunk:
            return seen
        seen += chunk
    return seen


def _rest_of(fd: int) -> bytes:
    """What the terminal shows until the (exited) child's end of it is closed."""
    seen = b""
    while select.select([fd], [], [], 5)[0]:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        seen += chunk
    return seen


def test_the_live_bar_and_the_prompt_on_a_terminal_show_a_hostile_server_escaped(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    """On a terminal: rich's live bar (which reads markup) and the interactive prompt."""
    proxy.mode = "esc"
    controller, terminal = pty.openpty()
    child = subprocess.Popen(
        _cli(
            hostile, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case_needing_dob(cases)]})
        ),
        env=_env(hostile),
        stdin=terminal,
        stderr=terminal,
        stdout=subprocess.PIPE,
    )
    os.close(terminal)
    try:
        # The prompt for the field ends with its (poisoned, so escaped) description and ": ".
        shown = _read_until(controller, b"\\u2028): ", timeout=60)
        os.write(controller, b"1970-01-02\n")
        stdout, _ = child.communicate(timeout=60)
        shown += _rest_of(controller)
    finally:
        os.close(controller)
        child.kill()
    assert child.returncode == 0, shown[-3000:]
    screen = shown.decode("utf-8", errors="replace")
    for raw in ("\x1b]0;PWNED", "\x1b[2J", "\x1b[31mFAKE", "\u009b", "\u202e", "\u200b", "\u2028"):
        assert raw not in screen, f"{raw!r} reached the terminal raw"
    assert not SGR_BLINK.search(shown), "the server's [blink] markup was rendered by rich"
    # The escaped text is what the person sees: the markup as text, the controls as escapes.
    assert "[bold red blink]FAKE[/]" in screen and "\\x1b]0;PWNED-TITLE" in screen
    _assert_nothing_raw(stdout.decode())


# N7 ------------------------------------------------------------------------------------------------


PEAK_LAUNCHER = """
import atexit, os, sys
def peak():
    with open("/proc/self/status") as status, open(os.environ["PEAK_FILE"], "w") as out:
        out.write(next(line.split()[1] for line in status if line.startswith("VmHWM:")))
atexit.register(peak)
from aml_mcp.cli import main
raise SystemExit(main(sys.argv[1:]))
"""
"""`python -m aml_mcp`, which also writes its peak resident memory (KiB) to `$PEAK_FILE` as it exits.
VmHWM is the high-water mark of this program's own memory; `ru_maxrss` would report the test
process's, which the child inherits at fork."""


def _run_measuring_peak(
    hostile: Hostile, tmp_path: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], int]:
    """The command's result and its peak resident memory in KiB."""
    peak_file = tmp_path / f"peak-{time.monotonic_ns()}"
    done = subprocess.run(
        [sys.executable, "-c", PEAK_LAUNCHER, *args, "--url", hostile.url],
        env={**_env(hostile), "PEAK_FILE": str(peak_file)},
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    return done, int(peak_file.read_text())


def test_a_huge_answer_is_cut_off_early_with_bounded_memory(
    hostile: Hostile, proxy: HostileProxy, cases: Cases, tmp_path: Path
) -> None:
    task_id = _started_task(hostile, cases)
    normal, normal_peak = _run_measuring_peak(hostile, tmp_path, "task", "get", task_id)
    assert normal.returncode == 0 and json.loads(normal.stdout)["taskId"] == task_id, normal.stderr

    proxy.mode, proxy.big_bytes = "bigjson", 48 * MIB
    since = time.monotonic()
    huge, peak = _run_measuring_peak(hostile, tmp_path, "task", "get", task_id)
    elapsed = time.monotonic() - since
    assert huge.returncode == EXIT_PROTOCOL, huge.stderr
    assert huge.stdout == ""
    assert huge.stderr.splitlines() == [
        "aml-mcp: the server's answer is larger than 4194304 bytes, the most this client reads"
        " (max_answer_bytes); it was not read further"
    ]
    # The client hung up soon after 4 MiB: the proxy never sent the rest (socket buffers aside).
    assert not proxy.big_finished and proxy.big_sent <= 24 * MIB, proxy.big_sent
    # Its memory stayed near that of a normal answer (reading all of it costs several times 48 MiB).
    assert peak - normal_peak < 24 * 1024, (peak, normal_peak)
    assert elapsed < 30, elapsed


def test_max_answer_bytes_sets_the_limit(hostile: Hostile, proxy: HostileProxy, cases: Cases) -> None:
    task_id = _started_task(hostile, cases)
    proxy.mode, proxy.big_bytes = "bigjson", 8 * MIB
    done = _run(hostile, "task", "get", task_id, "--max-answer-bytes", str(16 * MIB))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["statusMessage"] == "B" * 8 * MIB
    small = _run(hostile, "task", "get", task_id, "--max-answer-bytes", str(MIB))
    assert small.returncode == EXIT_PROTOCOL and "larger than 1048576 bytes" in small.stderr, small.stderr


def test_a_task_get_answer_about_another_task_is_refused(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    task_id = _started_task(hostile, cases)
    proxy.mode = "othertask"
    done = _run(hostile, "task", "get", task_id)
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"aml-mcp: the server's answer to tasks/get for task {task_id} is about another task: refused"
    ]
    assert OTHER_TASK not in done.stderr and OTHER_CANARY not in done.stderr


def test_a_followed_task_whose_poll_answers_another_task_ends_with_one_line(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    proxy.mode = "othertask"
    arguments = json.dumps({"case_ids": [complete_case(cases)]})
    done = _run(hostile, "call", "draft_sar_batch", "--json", arguments, "--poll")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].endswith("is about another task: refused"), done.stderr
    assert OTHER_TASK not in done.stderr + done.stdout and OTHER_CANARY not in done.stderr + done.stdout


def test_a_cancel_acknowledging_another_task_is_refused(
    hostile: Hostile, proxy: HostileProxy, cases: Cases
) -> None:
    task_id = _started_task(hostile, cases)
    proxy.mode = "othercancel"
    done = _run(hostile, "task", "cancel", task_id)
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"aml-mcp: the server's answer to tasks/cancel for task {task_id} is about another task: refused"
    ]


def test_a_compressed_answer_is_refused_unread(hostile: Hostile, proxy: HostileProxy, cases: Cases) -> None:
    task_id = _started_task(hostile, cases)
    proxy.mode = "gzip"
    done = _run(hostile, "task", "get", task_id)
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "aml-mcp: the server sent a compressed answer (Content-Encoding: gzip),"
        " which this client does not read"
    ]
