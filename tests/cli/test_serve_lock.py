"""One server per data directory (friction log F3): a second `aml-mcp serve` on a data directory a
running server holds exits 3 with one line naming that server, and changes nothing there (its
`server.json` still names the first); once the first has ended, even by SIGKILL, a new one starts.

The real command in child processes over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.cli.test_serve_lifecycle import SMALL_DEMO, _console_script, _free_port, _Serve
from tests.support.waiting import eventually

EXIT_DATA_DIR = 3


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


pytestmark = pytest.mark.slow


def test_a_second_serve_on_the_same_data_dir_exits_3_naming_the_first(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    first = _Serve(data_dir)
    try:
        eventually(lambda: _healthy(first.port), timeout=60, what="the first server to answer")
        record = (data_dir / "server.json").read_text()
        env = {**os.environ, **SMALL_DEMO}
        second_port = _free_port()
        second = subprocess.run(
            [*_console_script(), "serve", "--port", str(second_port), "--data-dir", str(data_dir)],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env, check=False,
        )  # fmt: skip
        assert second.returncode == EXIT_DATA_DIR, second.stderr
        lines = second.stderr.splitlines()
        assert len(lines) == 1, second.stderr
        assert f"pid {first.proc.pid}" in lines[0] and f"http://127.0.0.1:{first.port}/mcp" in lines[0]
        assert str(data_dir) in lines[0]
        assert (data_dir / "server.json").read_text() == record
        assert json.loads(record)["resource_url"] == f"http://127.0.0.1:{first.port}/mcp"
    finally:
        # SIGKILL: nothing of the first server's runs to let go of the lock; the kernel does.
        first.stop(signal.SIGKILL)
        first.stderr_file.close()
    after = _Serve(data_dir)
    try:
        assert after.proc.poll() is None
    finally:
        assert after.stop() == 0, after.stderr()
        after.stderr_file.close()
