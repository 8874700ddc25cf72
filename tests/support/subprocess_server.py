"""The real `aml-mcp` command in a child process, for tests about signals, crashes and restarts.

The child binds port 0 itself, so no other process can take the port between choosing and binding
it; its actual port is read from the child's listening socket (`conformance-server` logs at
warning level, so uvicorn's "running on" line is not printed to read it from).

A child can be spawned ahead of time: it does what `python -m aml_mcp` does — imports
`aml_mcp.cli` (seconds of work) and calls its `main()` with the same arguments — but waits for a go
line on stdin between the two, so a test can have it import while other work goes on and start it
the moment it is needed (e.g. right after killing the process it takes over from).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from types import TracebackType

import httpx
import psutil

from tests.support.waiting import eventually

# `python -m aml_mcp`, with a pause for the go line between importing and running `main()`.
_LAUNCHER = (
    "import sys; from aml_mcp.cli import main\n"
    "if sys.stdin.readline().strip() != 'go': raise SystemExit(0)  # the test went away\n"
    "raise SystemExit(main())"
)


def listening_port(pid: int) -> int:
    """The TCP port process `pid` listens on (0 while it listens on none): how a child started with
    `--port 0` is found, with no window in which another process could take its port."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.NoSuchProcess:
        return 0
    listening = [s.laddr.port for s in sockets if s.status == psutil.CONN_LISTEN]
    return listening[0] if listening else 0


class ServerProcess:
    """Runs `aml-mcp <args> --port 0` (the same entry point users run) until stopped.

    `port` and `url` are known once `start()` has seen the child listening.
    """

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.args = [sys.executable, "-c", _LAUNCHER, *args, "--port", "0"]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        # A file, not a pipe: a chatty child never blocks on it. Closed once the child has ended.
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115

    @property
    def url(self) -> str:
        assert self.port, "the server has not started"
        return f"http://127.0.0.1:{self.port}"

    def _listening_port(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited early: {self.stderr()}")
        return listening_port(self.proc.pid)

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def spawn(self) -> ServerProcess:
        """Start the child's imports without waiting for them; `start()` lets it go on to serve."""
        if self.proc is None:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=self._stderr
            )
        return self

    def start(self, timeout: float = 30.0) -> ServerProcess:
        """Spawn the child (unless `spawn` did), let it serve, and wait until it listens and answers
        `/healthz`."""
        self.spawn()
        assert self.proc is not None and self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.close()
        try:
            self.port = eventually(
                self._listening_port, timeout=timeout, interval=0.02, what="the server to listen"
            )
            eventually(self._healthy, timeout=timeout, interval=0.02, what="the server to be healthy")
        except BaseException:
            self.kill()
            raise
        return self

    def stderr(self) -> str:
        if self.proc is None or self.proc.poll() is None or self._stderr.closed:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdin is not None:
            self.proc.stdin.close()
        self._stderr.close()

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        status = self.proc.wait(timeout)
        self._stderr.close()
        return status

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.terminate()
        try:
            if self.proc is not None:
                self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.kill()
        self._stderr.close()
