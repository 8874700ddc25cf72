"""The real `aml-mcp serve` (or `conformance-server`) in a child process, found by what it announces.

With `--port 0 --metrics-port 0` the child listens on two ports it chose itself; which is which is
read from the lines it prints on stderr (`aml-mcp serving MCP at http://127.0.0.1:P/mcp`,
`metrics (...): http://127.0.0.1:Q/metrics`), exactly as an operator reads them, and the test
waits until both answer.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from types import TracebackType

import httpx

from tests.support.waiting import eventually

PUBLIC = re.compile(r"(?:serving MCP|conformance fixture server) at (http://127\.0\.0\.1:\d+)/mcp")
METRICS = re.compile(r"^metrics \([^)]*\): (http://\S+/metrics)$", re.MULTILINE)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


class AnnouncedServer:
    """`aml-mcp ARGS --port 0` until stopped; `base` is its public base URL, `metrics` the metrics
    listener's URL (None when it announced none). The public URL is read from the announcement, so
    a `--public-url` that is not loopback needs `base` given instead (see `ServerProcess`)."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.args = [sys.executable, "-m", "aml_mcp", *args, "--port", "0"]
        self.env = {**os.environ, **(env or {})}
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - a file: a chatty child never blocks
        self.proc: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.metrics: str | None = None

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def _announced(self) -> bool:
        assert self.proc is not None
        text = self.stderr()
        if self.proc.poll() is not None:
            raise AssertionError(f"the server exited ({self.proc.returncode}):\n{text}")
        public = PUBLIC.search(text)
        if public is None or ("--metrics-port" in self.args and METRICS.search(text) is None):
            return False
        self.base = public.group(1)
        found = METRICS.search(text)
        self.metrics = found.group(1) if found is not None else None
        return True

    def start(self, timeout: float = 120.0) -> AnnouncedServer:
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._stderr
        )
        try:
            eventually(self._announced, timeout=timeout, interval=0.05, what="the server's announcement")
            eventually(lambda: _answers(f"{self.base}/healthz"), timeout=timeout, what="the public port")
            if self.metrics is not None:
                metrics = self.metrics
                eventually(lambda: _answers(metrics), timeout=timeout, what="the metrics listener")
        except BaseException:
            self.stop(signal.SIGKILL)
            raise
        return self

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        """Send `sig` (if it still runs) and return its exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise

    def __enter__(self) -> AnnouncedServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if self.proc is not None:
                self.stop()
        finally:
            self._stderr.close()
