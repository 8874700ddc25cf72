"""`aml-mcp serve` as a user meets it: the banner's own token command works as printed, and a stop
signal ends it cleanly, in one log format, with no line said twice.

Everything runs the real command in a child process over real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.serve import command_prefix
from tests.support.mcp_http import call_tool
from tests.support.subprocess_server import listening_port
from tests.support.waiting import eventually

SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}
EXIT_LISTEN = 4
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR|CRITICAL) [\w.]+: ")

pytestmark = pytest.mark.slow


def _console_script() -> list[str]:
    """The installed `aml-mcp` program next to this Python (what `./dev` runs), else `-m aml_mcp`."""
    script = Path(sys.executable).parent / "aml-mcp"
    return [str(script)] if script.exists() else [sys.executable, "-m", "aml_mcp"]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Serve:
    """`aml-mcp serve --port P --data-dir D` exactly as typed (no `./dev`), stderr to a file."""

    def __init__(self, data_dir: Path) -> None:
        self.stderr_file = tempfile.TemporaryFile()  # noqa: SIM115
        env = {**os.environ, **SMALL_DEMO}
        env.pop("AML_MCP_COMMAND", None)
        for _ in range(5):  # a free port can be taken between choosing and binding it: try another
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [*_console_script(), "serve", "--port", str(self.port), "--data-dir", str(data_dir)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.stderr_file,
                env=env,
            )
            if eventually(self._listening_or_exited, timeout=120, what="serve to listen") == "listening":
                return
            assert self.proc.returncode == EXIT_LISTEN, self.stderr()
            self.stderr_file.seek(0)
            self.stderr_file.truncate()
        raise AssertionError("no free port to serve on")

    def _listening_or_exited(self) -> str | None:
        if self.proc.poll() is not None:
            return "exited"
        return "listening" if listening_port(self.proc.pid) == self.port else None

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read().decode(errors="replace")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise


@pytest.fixture
def served(tmp_path: Path) -> Iterator[_Serve]:
    server = _Serve(tmp_path / "data")
    try:
        yield server
    finally:
        server.stop()
        server.stderr_file.close()


def _banner_command(stderr: str, subcommand: str) -> list[str]:
    """The command line the banner prints for `subcommand` (e.g. `token`), split as a shell would."""
    for line in stderr.splitlines():
        words = shlex.split(line.strip())
        if subcommand in words[:4] and "--data-dir" in words:
            return words
    raise AssertionError(f"the banner names no {subcommand} command:\n{stderr}")


def test_the_banners_own_token_command_works_against_a_server_on_another_port(served: _Serve) -> None:
    eventually(lambda: "trusted issuers:" in served.stderr(), timeout=10, what="the banner")
    banner = served.stderr()
    assert f"http://127.0.0.1:{served.port}/mcp" in banner
    assert "alice, carol (meridian-bank)" in banner and '"Connect a client"' in banner
    command = _banner_command(banner, "token")
    assert command[0] != "aml-mcp" or shutil.which("aml-mcp"), "a bare aml-mcp is not on PATH here"
    assert "--port" not in command  # the server's record in the data directory says where it is
    minted = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert minted.returncode == 0, minted.stderr
    token = minted.stdout.strip()

    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=30) as http:
        answer = call_tool(http, "search_aml_notes", {"query": "cash structuring", "top_k": 2}, token=token)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert not result.get("isError"), result
    assert result["structuredContent"]["results"], result


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_ends_serve_cleanly_in_one_format_with_no_line_twice(
    sig: signal.Signals, served: _Serve
) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{served.port}", timeout=10) as http:
        assert http.get("/healthz").status_code == 200
    status = served.stop(sig)
    stderr = served.stderr()
    assert status == 0, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.rstrip().endswith(f"aml-mcp stopped ({sig.name})"), stderr

    logged = [line for line in stderr.splitlines() if LOG_LINE.match(line)]
    assert any("Application startup complete" in line for line in logged), stderr
    assert any("Application shutdown complete" in line for line in logged), stderr
    assert not [line for line in stderr.splitlines() if line.startswith(("INFO:", "WARNING:", "ERROR:"))]
    messages = [LOG_LINE.sub("", line) for line in logged]
    repeated = {message for message in messages if messages.count(message) > 1}
    assert not repeated, stderr


def test_the_command_prefix_is_what_the_user_can_type(tmp_path: Path) -> None:
    assert command_prefix({"AML_MCP_COMMAND": "./dev"}, "/x/aml-mcp") == "./dev"
    script = tmp_path / "bin" / "aml-mcp"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert command_prefix({"PATH": str(script.parent)}, str(script)) == "aml-mcp"
    assert command_prefix({"PATH": "/nonexistent"}, str(script)) == str(script.resolve())
    assert command_prefix({}, "/x/aml_mcp/__main__.py").endswith(" -m aml_mcp")
