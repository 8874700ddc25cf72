"""HTTP/1.1 over a plain socket, for tests that send what no well-behaved client library would:
thousands of header fields, heads that never end, bodies that stop halfway."""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import Any


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request_bytes(
    port: int, method: str, path: str, headers: list[tuple[str, str]], body: bytes = b""
) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body or method == "POST":
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def read_response(sock: socket.socket, timeout: float = 30.0) -> RawResponse:
    """One response: status line, headers, then a Content-Length body (or up to the close)."""
    sock.settimeout(timeout)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before a response head: {data[:200]!r}")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        length = int(headers["content-length"])
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            rest += chunk
        return RawResponse(status, headers, rest[:length])
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return RawResponse(status, headers, rest)
        rest += chunk


def exchange(port: int, raw: bytes, timeout: float = 30.0) -> RawResponse:
    """Send `raw` on a new connection and read one response."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(raw)
        return read_response(sock, timeout)


def closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the server closes the connection or `seconds` pass; (closed, what was received)."""
    received = b""
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False, received
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False, received
        except ConnectionResetError:
            return True, received
        if not chunk:
            return True, received
        received += chunk
