"""Reading an SSE response frame by frame, with a deadline per frame."""

from __future__ import annotations

import contextlib
import json
import queue
import socket
import threading
import time
from typing import Any

import httpx


class SseReader:
    """Parses `data:` lines of a streaming response on a background thread, so reads can time out."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self._messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for line in self.response.iter_lines():
                if line.startswith("data:"):
                    self._messages.put(json.loads(line[5:].strip()))
        except (httpx.HTTPError, RuntimeError, ValueError):
            pass
        finally:
            self._messages.put(None)

    def close(self) -> None:
        """Hang up now: shut the connection's socket, which also ends the reading thread.

        Closing the httpx response from this thread while the reader thread is blocked in it
        leaves the connection open, and the server then keeps the stream (and its slot) until its
        next keep-alive ping finds the client gone."""
        network = self.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._thread.join(5)

    def next(self, timeout: float = 5.0) -> dict[str, Any] | None:
        """The next message, or `None` once the stream has ended; raises `TimeoutError` if none comes."""
        try:
            return self._messages.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError("no SSE message within the deadline") from None

    def rest(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every remaining message until the stream ends."""
        out: list[dict[str, Any]] = []
        while (message := self.next(timeout)) is not None:
            out.append(message)
        return out


def final_states(stream: SseReader, task_ids: list[str], timeout: float) -> dict[str, str]:
    """Read task notifications until every id has a terminal status (or the time is up)."""
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(
        states.get(t) in ("completed", "failed", "cancelled") for t in task_ids
    ):
        try:
            note = stream.next(timeout=max(0.05, deadline - time.monotonic()))
        except TimeoutError:
            break
        if note is None:
            break
        if note.get("method") == "notifications/tasks":
            states[note["params"]["taskId"]] = note["params"]["status"]
    return states
