"""The HTTP/1.1 connection `aml-mcp serve` runs: uvicorn's httptools protocol, with the two bounds
it lacks.

httptools buffers a request head of any size (a 40 MiB header line was held until the client left)
and uvicorn never times out a connection that has not finished its request (one that sent nothing,
half a request line, or a body it never completes stays open for ever). So, per connection:

- the head (request line and header fields) may be at most `max_head_bytes`: the bytes received
  while it is incomplete are counted, and past the limit the client gets a 431 and the connection
  is closed, so the parser never holds more than the limit plus one read;
- a request must be complete (head and body) within `read_timeout` of the connection opening or
  of its first byte; otherwise the connection is closed, with a 408 when no response has begun.

Idle keep-alive connections between requests stay governed by uvicorn's own keep-alive timeout,
and a response that streams (a listen) is not limited: the deadline stops when the request is in.
httptools is kept (rather than h11, whose head limit is built in) because h11 costs 20-30 % more
server CPU per request, while these bounds cost nothing measurable (`benchmarks/http_parser.py`);
the price is that the hooks use uvicorn's httptools protocol and its parser callbacks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar

from mcp_types import INVALID_REQUEST
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from aml_mcp.http.settings import HttpSettings

_REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}


def _refusal(status: int, message: str) -> bytes:
    """A complete `Connection: close` response with a JSON-RPC error body (the /mcp shape)."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": None, "error": {"code": INVALID_REQUEST, "message": message}},
        separators=(",", ":"),
    ).encode()
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % (status, _REASONS[status], len(body))
    )
    return head + body


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` with a bound on head bytes and a deadline for receiving each request.

    Use `bounded_protocol(...)` to get a subclass with the limits set; uvicorn constructs one
    instance per connection.
    """

    max_head_bytes: ClassVar[int] = 32 * 1024
    read_timeout: ClassVar[float] = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._deadline: asyncio.TimerHandle | None = None

    # Connection events

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._in_head:
            # Counted before parsing, so a read that also completes the head (and carries body
            # bytes) may over-count; the check below only applies while the head is unfinished.
            self._head_bytes += len(data)
        super().data_received(data)
        if self._in_head and self._head_bytes > self.max_head_bytes and not self.transport.is_closing():
            self.logger.info("Request head over %d bytes; closing the connection.", self.max_head_bytes)
            self._refuse(431, f"Request header fields too large: at most {self.max_head_bytes} bytes")

    # Parser callbacks (httptools calls them from inside `data_received`)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_bytes = 0
        self._disarm()

    def handle_websocket_upgrade(self) -> None:
        self._disarm()  # the connection now belongs to another protocol object
        super().handle_websocket_upgrade()

    # The deadline

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout, self._timed_out)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _timed_out(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        self.logger.info("Request not received within %.0f s; closing the connection.", self.read_timeout)
        self._refuse(408, f"Request not received within {self.read_timeout:g} seconds")

    def _refuse(self, status: int, message: str) -> None:
        """Answer `status` if nothing else is being written on this connection, then close it.

        While a request's body is being read its application may still answer; closing the
        connection tells it the client is gone (`http.disconnect`), and nothing is written over it.
        """
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete
        if not answering:
            self.transport.write(_refusal(status, message))
        elif not cycle.response_started:
            cycle.disconnected = True
        self.transport.close()


def bounded_protocol(*, max_head_bytes: int, read_timeout: float) -> type[BoundedHttpToolsProtocol]:
    """A protocol class for `uvicorn.Config(http=...)` with these limits (uvicorn takes a class)."""

    class Bounded(BoundedHttpToolsProtocol):
        pass

    Bounded.max_head_bytes = max_head_bytes
    Bounded.read_timeout = read_timeout
    return Bounded


def uvicorn_options(limits: HttpSettings) -> dict[str, Any]:
    """The `uvicorn.Config` keywords that bound what one client can hold: head size, read time,
    connections (uvicorn answers 503 beyond `limit_concurrency`). No route speaks WebSocket, so
    upgrades are not offered at all."""
    return {
        "http": bounded_protocol(
            max_head_bytes=limits.max_header_bytes, read_timeout=limits.request_read_timeout_seconds
        ),
        "limit_concurrency": limits.max_connections,
        "ws": "none",
    }
