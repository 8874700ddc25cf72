"""`aml-mcp call` and `aml-mcp task` as users run them: the real command in a child process against a
real server over HTTP, with real tokens; a pseudo-terminal for the interactive prompt and Ctrl-C."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.aml.notes.model import CaseNote
from tests.aml.tools import slow_drafter
from tests.aml.tools.aml_client import A, load_demo
from tests.support.aml_live import (
    ALL_SCOPES,
    case_needing_dob,
    complete_case,
    demo_cases_by_bank,
    live_aml_server,
)
from tests.support.oauth import SecuredServer, TestIssuer, audit_events
from tests.support.waiting import eventually

Cases = dict[str, list[CaseNote]]
SLOW_DRAFT_SECONDS = 0.3
"""Per case, so an evaluation (tens of cases) is still running when the test presses Ctrl-C."""


@pytest.fixture(scope="module")
def cases() -> Cases:
    return demo_cases_by_bank()[A]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    demo = tmp_path_factory.mktemp("cli-demo")
    load_demo(demo)
    slow_drafter.DELAY_S, saved = SLOW_DRAFT_SECONDS, slow_drafter.DELAY_S
    try:
        with live_aml_server(
            tmp_path_factory.mktemp("cli-aml"), issuer, demo, drafter=f"{slow_drafter.__name__}:SlowDrafter"
        ) as live:
            yield live
    finally:
        slow_drafter.DELAY_S = saved


def _env(server: SecuredServer) -> dict[str, str]:
    token = server.mint(tenant=A, scope=ALL_SCOPES, subject="carol", client_id="cli")
    return {**os.environ, "AML_MCP_TOKEN": token, "COLUMNS": "120"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "aml_mcp", *args]


def _run(server: SecuredServer, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(*args, "--url", f"{server.url}/mcp"),
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_synchronous_call_prints_the_structured_result(server: SecuredServer) -> None:
    done = _run(server, "call", "search_aml_notes", "--arg", "query=cash deposits", "--arg", "top_k=2")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert [hit["case_id"] for hit in result["results"]] and len(result["results"]) == 2


def test_draft_with_answers_given_as_flags_runs_to_completion(server: SecuredServer, cases: Cases) -> None:
    case = case_needing_dob(cases)
    done = _run(
        server, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case]}),
        "--answer", "date_of_birth=1970-01-02",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    drafted = json.loads(done.stdout)["cases"][0]
    assert drafted["case_id"] == case and "1970-01-02" in json.dumps(drafted)
    # Plain progress lines (stderr is not a terminal): the task was asked for input, then completed.
    assert "input_required" in done.stderr and "completed" in done.stderr


def test_input_that_cannot_be_answered_is_listed_and_fails(server: SecuredServer, cases: Cases) -> None:
    case = case_needing_dob(cases)
    done = _run(server, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case]}))
    assert done.returncode == 5, done.stderr
    assert f"dob:{case}:" in done.stderr and "date of birth" in done.stderr and "date_of_birth" in done.stderr
    assert done.stdout == ""
    # The hints are commands to paste as they are: with the --url this one was given.
    hints = [line.strip() for line in done.stderr.splitlines() if " task " in line and "--url" in line]
    answer, cancel = (next(h for h in hints if f" task {verb} " in h) for verb in ("answer", "cancel"))
    assert f"--url {server.url}/mcp" in answer and "--answer KEY=VALUE" in answer
    pasted = subprocess.run(
        ["bash", "-c", cancel], env=_env(server), capture_output=True, text=True, timeout=90, check=False
    )
    assert pasted.returncode == 0, (cancel, pasted.stderr)
    task_id = json.loads(pasted.stdout)["taskId"]
    eventually(
        lambda: json.loads(_run(server, "task", "get", task_id).stdout)["status"] == "cancelled",
        timeout=60,
        interval=0.5,
        what="the task to be cancelled",
    )


def test_no_wait_prints_the_task_and_task_get_follows_it(server: SecuredServer, cases: Cases) -> None:
    arguments = json.dumps({"case_ids": [complete_case(cases)]})
    started = _run(server, "call", "draft_sar_batch", "--json", arguments, "--no-wait")
    assert started.returncode == 0, started.stderr
    task_id = json.loads(started.stdout)["taskId"]

    def completed() -> dict[str, object] | None:
        got = _run(server, "task", "get", task_id)
        assert got.returncode == 0, got.stderr
        state: dict[str, object] = json.loads(got.stdout)
        return state if state["status"] == "completed" else None

    state = eventually(completed, timeout=60, interval=0.5, what="the task to complete")
    assert state["taskId"] == task_id and "result" in state
    # Cancelling it now cancels nothing, and says so: exit 7, the status it ended with, no result.
    late = _run(server, "task", "cancel", task_id)
    assert late.returncode == 7, late.stderr
    assert "had already ended (completed)" in late.stderr and late.stdout == ""


def test_run_full_eval_completes_with_exit_status_zero(server: SecuredServer) -> None:
    done = _run(server, "call", "run_full_eval", "--arg", "save_as_baseline=false", timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["cases"] > 0 and "completed" in done.stderr and "HTTP Request" not in done.stderr


def _read_until(fd: int, wanted: bytes, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while wanted not in seen:
        if time.monotonic() > deadline:
            raise AssertionError(f"{wanted!r} never appeared; got {seen[-2000:]!r}")
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        seen += chunk
    return seen


def _spawn_on_pty(server: SecuredServer, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """The CLI with a terminal for stdin and stderr (as a person runs it); stdout a pipe."""
    controller, terminal = pty.openpty()
    child = subprocess.Popen(
        _cli(*args, "--url", f"{server.url}/mcp"),
        env=_env(server),
        stdin=terminal,
        stderr=terminal,
        stdout=subprocess.PIPE,
    )
    os.close(terminal)
    return child, controller


def test_input_required_is_asked_on_the_terminal(server: SecuredServer, cases: Cases) -> None:
    case = case_needing_dob(cases)
    child, terminal = _spawn_on_pty(
        server, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case]})
    )
    try:
        shown = _read_until(terminal, b"Date of birth", timeout=60)
        assert case.encode() in shown
        os.write(terminal, b"1970-01-02\n")
        stdout, _ = child.communicate(timeout=60)
    finally:
        os.close(terminal)
        child.kill()
    assert child.returncode == 0
    assert "1970-01-02" in json.dumps(json.loads(stdout)["cases"][0])


def _task_status(data_dir: Path, server: SecuredServer, task_id: str) -> str:
    token = server.mint(tenant=A, scope=ALL_SCOPES, subject="carol", client_id="cli")
    got = server.post("tasks/get", {"taskId": task_id}, token=token, capabilities={"extensions": {
        "io.modelcontextprotocol/tasks": {}}})  # fmt: skip
    status: str = got.json()["result"]["status"]
    return status


def test_ctrl_c_cancels_the_task_within_a_second(server: SecuredServer) -> None:
    child, terminal = _spawn_on_pty(server, "call", "run_full_eval")
    try:
        _read_until(terminal, b"working", timeout=60)  # the live bar shows the task running
        since = time.monotonic()
        child.send_signal(signal.SIGINT)
        child.wait(timeout=5)
        elapsed = time.monotonic() - since
        said = _read_until(terminal, b"interrupted", timeout=2)
    finally:
        os.close(terminal)
        child.kill()
    assert child.returncode == 130
    assert elapsed < 1.0, elapsed
    task_id = said.decode(errors="replace").split("interrupted: task ", 1)[1].split()[0]
    eventually(
        lambda: _task_status(server.data_dir, server, task_id) == "cancelled",
        timeout=1.0,
        interval=0.05,
        what="the task to be cancelled",
    )
    assert any(e["method"] == "tasks/cancel" for e in audit_events(server.data_dir))


def test_task_answer_gives_a_waiting_task_its_input(server: SecuredServer, cases: Cases) -> None:
    case = case_needing_dob(cases)
    started = _run(server, "call", "draft_sar_batch", "--json", json.dumps({"case_ids": [case]}), "--no-wait")
    task_id = json.loads(started.stdout)["taskId"]
    eventually(
        lambda: json.loads(_run(server, "task", "get", task_id).stdout)["status"] == "input_required",
        timeout=60,
        interval=0.5,
        what="the task to ask for input",
    )
    answered = _run(server, "task", "answer", task_id, "--answer", "date_of_birth=1970-01-02")
    assert answered.returncode == 0, answered.stderr

    def completed() -> dict[str, object] | None:
        state: dict[str, object] = json.loads(_run(server, "task", "get", task_id).stdout)
        return state if state["status"] == "completed" else None

    state = eventually(completed, timeout=60, interval=0.5, what="the task to complete")
    assert "1970-01-02" in json.dumps(state["result"])
