"""`aml-mcp call` retries a create that got no answer with the same idempotency key, and
`--idempotency-key` names a create, so the command run twice gets one task.

The real command in a child process, through a small real proxy (`tests/client/flaky_proxy.py`) in
front of a real server: the first create's answer is lost after the server stored the task (the
proxy closes the connection), and the command still prints that task, the only one stored.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.client.flaky_proxy import Fault, FlakyProxy
from tests.support.live_server import LiveServer
from tests.support.settings import open_settings

ARGS = json.dumps({"seconds": 0.1, "label": "once"})


def run(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "aml_mcp",
            "call",
            "slow_compute",
            "--json",
            ARGS,
            "--no-wait",
            "--url",
            url,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def call(url: str, *extra: str) -> dict[str, object]:
    done = run(url, *extra)
    assert done.returncode == 0, done.stderr
    printed: dict[str, object] = json.loads(done.stdout)
    return printed


def rows(data_dir: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(data_dir / "aml-mcp.db")) as conn:
        return [row[0] for row in conn.execute("SELECT task_id FROM tasks")]


def test_a_create_whose_answer_was_lost_is_sent_again_and_stored_once(tmp_path: Path) -> None:
    app = build_app(open_settings(tmp_path), catalog=fixture_catalog())
    with LiveServer(app) as live, FlakyProxy(live.port, [Fault.LOST_ANSWER]) as proxy:
        task = call(f"{proxy.url}/mcp")
        assert len(proxy.seen) == 2  # the lost create and its retry
        assert rows(tmp_path) == [task["taskId"]]


def test_the_same_idempotency_key_twice_prints_the_same_task(tmp_path: Path) -> None:
    app = build_app(open_settings(tmp_path), catalog=fixture_catalog())
    with LiveServer(app) as live:
        first = call(f"{live.url}/mcp", "--idempotency-key", "nightly-2026-07-28")
        second = call(f"{live.url}/mcp", "--idempotency-key", "nightly-2026-07-28")
        assert first["taskId"] == second["taskId"]
        assert rows(tmp_path) == [first["taskId"]]


def test_a_server_out_of_reach_after_every_attempt_is_one_line_and_exit_6(tmp_path: Path) -> None:
    app = build_app(open_settings(tmp_path), catalog=fixture_catalog())
    with LiveServer(app) as live, FlakyProxy(live.port, [Fault.REFUSED] * 4) as proxy:
        done = run(f"{proxy.url}/mcp")
        assert len(proxy.seen) == 4  # every attempt, then no more
    assert done.returncode == 6, done.stderr
    assert "aml-mcp: cannot reach" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert rows(tmp_path) == []
