"""A small real HTTP proxy that fails chosen requests, for the client's retry tests.

It sits on 127.0.0.1 (a random port) in front of a server, reads each HTTP/1.1 request whole, and
either forwards it (raw bytes, `Connection: close`, the answer piped back as it comes, SSE included)
or fails it the way a dying replica or a balancer does:

- `Fault.UNAVAILABLE`: answers 503 with `Retry-After` and a JSON-RPC error body, forwarding nothing;
- `Fault.BAD_GATEWAY`: answers HAProxy's 502 HTML page, forwarding nothing;
- `Fault.REFUSED`: closes the connection without an answer, forwarding nothing;
- `Fault.LOST_ANSWER`: forwards the request, reads the server's whole answer, then closes the
  connection without sending it: the server did the work, the client never learns of it.

`faults` is a list consumed in order by the requests `matches` selects (by default every
`tools/call`); `seen` records each selected request's body, so a test sees what was retried.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable
from enum import Enum
from types import TracebackType
from typing import Any


class Fault(Enum):
    UNAVAILABLE = "503"
    BAD_GATEWAY = "502"
    REFUSED = "refused"
    LOST_ANSWER = "lost answer"


UNAVAILABLE_BODY = json.dumps(
    {"jsonrpc": "2.0", "id": None, "error": {"code": -32010, "message": "Service unavailable, retry later"}}
).encode()
BAD_GATEWAY_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>\n"


def _is_tool_call(body: dict[str, Any]) -> bool:
    return body.get("method") == "tools/call"


class FlakyProxy:
    """A context manager; `url` is the proxy's base URL (the upstream's path goes after it)."""

    def __init__(
        self,
        upstream_port: int,
        faults: list[Fault],
        *,
        retry_after: str = "0",
        matches: Callable[[dict[str, Any]], bool] = _is_tool_call,
    ) -> None:
        self.upstream_port = upstream_port
        self.faults = list(faults)
        self.retry_after = retry_after
        self.matches = matches
        self.seen: list[dict[str, Any]] = []
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    def __enter__(self) -> FlakyProxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the proxy did not start")
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self._sock.listen(64)
        server = await asyncio.start_server(self._connection, sock=self._sock)
        self._ready.set()
        async with server:
            await self._stop.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                head, body = request
                if not await self._answer(head, body, writer):
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _answer(self, head: bytes, body: bytes, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; whether the connection may carry another."""
        fault = None
        try:
            parsed = json.loads(body) if body else {}
        except ValueError:
            parsed = {}
        if isinstance(parsed, dict) and self.matches(parsed):
            self.seen.append(parsed)
            fault = self.faults.pop(0) if self.faults else None
        if fault is Fault.REFUSED:
            return False
        if fault is Fault.UNAVAILABLE:
            writer.write(
                _response(503, "application/json", UNAVAILABLE_BODY, {"Retry-After": self.retry_after})
            )
            await writer.drain()
            return True
        if fault is Fault.BAD_GATEWAY:
            writer.write(_response(502, "text/html", BAD_GATEWAY_BODY, {}))
            await writer.drain()
            return True
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        try:
            up_writer.write(_closing(head) + body)
            await up_writer.drain()
            if fault is Fault.LOST_ANSWER:
                await up_reader.read()  # the server answered in full; the client gets nothing
                return False
            while chunk := await up_reader.read(65536):
                writer.write(chunk)
                await writer.drain()
        finally:
            up_writer.close()
        return False  # the upstream closed after its answer: so does this connection


async def _read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes] | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    body = await reader.readexactly(length) if length else b""
    return head, body


def _closing(head: bytes) -> bytes:
    """The request head with `Connection: close`, so the upstream ends the answer by closing."""
    lines = [line for line in head.split(b"\r\n") if line and not line.lower().startswith(b"connection:")]
    return b"\r\n".join([*lines, b"Connection: close", b"", b""])


def _response(status: int, content_type: str, body: bytes, headers: dict[str, str]) -> bytes:
    reason = {502: "Bad Gateway", 503: "Service Unavailable"}[status]
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
        f"{extra}\r\n"
    ).encode() + body
