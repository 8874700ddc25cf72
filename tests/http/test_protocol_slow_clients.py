"""Slow and endless clients against the real `aml-mcp` process, over real sockets (M3).

`aml-mcp serve` (and `conformance-server`) run uvicorn with `http.protocol.uvicorn_options`: the
request head is bounded in bytes while it is still arriving, each request must be received within
`http.request_read_timeout_seconds`, and connections are capped. Before, five clients each sending
an endless header line grew the server by 138-177 MiB and kept it; connections that sent nothing
or half a request line stayed open for ever. The server here runs with a 1 s read timeout (set
through the environment, as an operator would) so the tests stay short.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.mcp_http import TASKS_EXTENSION, headers_for, message
from tests.support.raw_http import closed_within, exchange, read_response, request_bytes
from tests.support.subprocess_server import ServerProcess

READ_TIMEOUT = 1.0
SLACK = 2.0
"""Scheduling on a loaded 2-core test machine; the regression guarded against is 'never'."""
MIB = 1024 * 1024


def _conformance_server(data_dir: Path, **http: object) -> ServerProcess:
    env = {f"AML_MCP_HTTP__{name.upper()}": str(value) for name, value in http.items()}
    return ServerProcess(["conformance-server", "--data-dir", str(data_dir)], env=env)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slow-clients")


@pytest.fixture(scope="module")
def server(data_dir: Path) -> Iterator[ServerProcess]:
    with _conformance_server(data_dir, request_read_timeout_seconds=READ_TIMEOUT) as running:
        yield running


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=10)


def served_normally(server: ServerProcess) -> bool:
    body = message("tools/list")
    response = httpx.post(
        f"{server.url}/mcp", content=json.dumps(body), headers=headers_for(body), timeout=10
    )
    return response.status_code == 200 and "tools" in response.json()["result"]


def test_clients_trickling_an_endless_head_are_cut_off_while_others_are_served(server: ServerProcess) -> None:
    outcomes: list[tuple[float, bytes]] = []
    lock = threading.Lock()

    def trickle() -> None:
        with connect(server) as sock:
            started = time.monotonic()
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            received = b""
            while time.monotonic() - started < READ_TIMEOUT + SLACK + 5:
                try:
                    sock.sendall(b"a" * 16)
                except OSError:
                    break
                closed, received = closed_within(sock, 0.1)
                if closed:
                    break
            with lock:
                outcomes.append((time.monotonic() - started, received))

    clients = [threading.Thread(target=trickle) for _ in range(5)]
    for client in clients:
        client.start()
    time.sleep(0.2)
    assert served_normally(server)  # while all five trickle
    for client in clients:
        client.join()

    assert len(outcomes) == 5
    for elapsed, received in outcomes:
        assert elapsed < READ_TIMEOUT + SLACK
        if received:  # the 408 may be lost to a reset when the client is mid-send
            assert received.startswith(b"HTTP/1.1 408")
    assert served_normally(server)


def test_endless_header_values_are_refused_at_the_head_limit_and_memory_stays_bounded(
    server: ServerProcess,
) -> None:
    assert server.proc is not None
    before = rss_bytes(server.proc.pid)
    sockets: list[socket.socket] = []
    accepted: list[int] = []
    chunk = b"a" * 65536
    try:
        for _ in range(5):
            sock = connect(server)
            sockets.append(sock)
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
            sent = 0
            sock.settimeout(2)
            try:
                while sent < 16 * MIB:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # cut off: refused and closed by the server (or its buffers are full)
            accepted.append(sent)
        time.sleep(0.5)
        grown = rss_bytes(server.proc.pid) - before  # measured while every client still holds on
        for sock in sockets:
            closed, received = closed_within(sock, 2)
            assert closed
            if received:
                assert received.startswith(b"HTTP/1.1 431")
    finally:
        for sock in sockets:
            sock.close()
    # Unbounded, the parser held every byte: 5 x 16 MiB. Bounded, each holds at most the head limit.
    assert grown < 20 * MIB, f"server grew by {grown / MIB:.1f} MiB"
    assert served_normally(server)


def test_a_single_oversized_header_gets_431_with_a_json_rpc_body(server: ServerProcess) -> None:
    body = json.dumps(message("tools/list")).encode()
    headers = [*headers_for(message("tools/list")).items(), ("X-Big", "a" * 8 * 1024 * 1024)]
    with connect(server) as sock:
        with contextlib.suppress(OSError):  # the server may close before the client is done sending
            sock.sendall(request_bytes(server.port, "POST", "/mcp", headers, body))
        try:
            answer = read_response(sock, timeout=5)
        except (ConnectionError, OSError):
            return  # reset while the client was still sending: refused all the same
    assert answer.status == 431
    assert answer.json()["error"]["code"] == -32600


@pytest.mark.parametrize(
    "opening",
    [b"", b"PO", b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"],
    ids=["nothing", "half a request line", "headers never ended"],
)
def test_a_connection_that_never_finishes_its_head_is_closed_with_408(
    server: ServerProcess, opening: bytes
) -> None:
    with connect(server) as sock:
        started = time.monotonic()
        if opening:
            sock.sendall(opening)
        closed, received = closed_within(sock, READ_TIMEOUT + SLACK)
        assert closed and time.monotonic() - started >= READ_TIMEOUT * 0.9
    assert received.startswith(b"HTTP/1.1 408")
    assert b'"code":-32600' in received


def _task_rows(data_dir: Path) -> int:
    path = data_dir / "aml-mcp.db"
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT count(*) FROM tasks").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("who_closes", ["server, at the read timeout", "client, mid-body"])
def test_a_body_that_never_completes_is_never_processed(
    server: ServerProcess, data_dir: Path, who_closes: str
) -> None:
    """A complete JSON document sent under a larger Content-Length: a body cut short by the close
    must not be taken for the whole (before, it was, and this one would have created a task)."""
    call = message(
        "tools/call",
        {"name": "slow_compute", "arguments": {"seconds": 0}},
        capabilities={"extensions": {TASKS_EXTENSION: {}}},
    )
    body = json.dumps(call).encode()
    head = request_bytes(server.port, "POST", "/mcp", list(headers_for(call).items()), b"")
    head = head.replace(b"Content-Length: 0", b"Content-Length: %d" % (len(body) + 10))
    rows = _task_rows(data_dir)
    with connect(server) as sock:
        sock.sendall(head + body)
        if who_closes.startswith("server"):
            closed, received = closed_within(sock, READ_TIMEOUT + SLACK)
            assert closed and received == b""  # the application was reading: nothing is written over it
        else:
            time.sleep(0.3)
    time.sleep(0.5)
    assert _task_rows(data_dir) == rows
    assert served_normally(server)


def test_a_response_slower_than_the_read_timeout_is_not_cut(server: ServerProcess) -> None:
    """The deadline covers receiving the request only; answering may take as long as it takes."""
    call = message("tools/call", {"name": "slow_compute", "arguments": {"seconds": READ_TIMEOUT * 2}})
    answer = exchange(
        server.port,
        request_bytes(
            server.port, "POST", "/mcp", list(headers_for(call).items()), json.dumps(call).encode()
        ),
    )
    assert answer.status == 200
    assert answer.json()["result"]["content"][0]["text"].startswith("Computed for")


def test_keep_alive_connections_serve_request_after_request(server: ServerProcess) -> None:
    call = message("tools/list")
    raw = request_bytes(
        server.port, "POST", "/mcp", list(headers_for(call).items()), json.dumps(call).encode()
    )
    with connect(server) as sock:
        for _ in range(3):
            sock.sendall(raw)
            assert read_response(sock).status == 200
            time.sleep(READ_TIMEOUT * 0.6)  # idle between requests does not count against the deadline


def test_connections_beyond_the_cap_are_answered_503_until_slots_free_up(
    tmp_path: Path,
) -> None:
    with _conformance_server(tmp_path, max_connections=4, request_read_timeout_seconds=2) as capped:
        idle = [socket.create_connection(("127.0.0.1", capped.port), timeout=10) for _ in range(4)]
        try:
            time.sleep(0.2)
            refused = exchange(capped.port, request_bytes(capped.port, "GET", "/healthz", []))
            assert refused.status == 503
            for sock in idle:  # the read timeout frees the slots idle clients held
                assert closed_within(sock, 2 + SLACK)[0]
        finally:
            for sock in idle:
                sock.close()
        assert exchange(capped.port, request_bytes(capped.port, "GET", "/healthz", [])).status == 200
