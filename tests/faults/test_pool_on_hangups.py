"""D8: a client hanging up while its request's query runs keeps the pool whole.

A request that streams (a listen, or a call with a progress token) is cancelled by the SDK when its
client disconnects. Before the fix the cancellation reached psycopg mid-query, its own cancel was
interrupted by the cancel scope ("query cancellation interrupted (CancelledError): closing
connection"), and the pool threw the connection away: a new connection, and a cancel connection,
per hang-up (96 in 3 minutes in the review's soak). Now a single statement on the pool finishes
(shielded, within a bound) and its connection goes back to the pool.

Every `tasks/get` here waits for a lock the test holds on the task table, so each of the 50 clients
hangs up while its query is running; the connections are told apart by their backend pids on a
server of the test's own. Before the fix: 50 closed by psycopg, 51 pool connections in all.
"""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.live_server import LiveServer
from tests.support.mcp_http import TASKS_ONLY, create, get, headers_for, message
from tests.support.private_postgres import PrivatePostgres
from tests.support.raw_http import request_bytes
from tests.support.settings import open_settings
from tests.support.waiting import eventually

pytestmark = pytest.mark.faults

SCHEMA = "d8_hangups"
ROUNDS, PER_ROUND = 10, 5
"""50 hang-ups in all, 5 at a time (fewer than the pool holds, so each is a running query)."""
POOL = 10


@pytest.fixture(scope="module")
def served(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    settings = open_settings(
        Path(tmp_path_factory.mktemp("d8")),
        database_url=private_postgres.url,
        database_schema=SCHEMA,
        database_pool_size=POOL,
    )
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


def waiting_on_the_lock(pg: PrivatePostgres) -> int:
    with pg.connect() as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'aml-mcp'"
            " AND wait_event_type = 'Lock' AND query LIKE %s",
            ("%FROM tasks%",),
        ).fetchone()
    return int(row[0]) if row else 0


def hang_up_mid_query(port: int, task_id: str) -> socket.socket:
    """Send a streamed `tasks/get` (a progress token: the SSE path, which a disconnect cancels)."""
    body = message("tasks/get", {"taskId": task_id}, capabilities=TASKS_ONLY, progressToken="p")
    content = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(request_bytes(port, "POST", "/mcp", list(headers_for(body).items()), content))
    return sock


def test_fifty_clients_hanging_up_mid_query_cost_no_pooled_connection(
    served: LiveServer, private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    with httpx.Client(base_url=served.url, timeout=10) as client:
        task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
        get(client, task_id)
        unknown = secrets.token_urlsafe(24)
        seen = set(private_postgres.connections("aml-mcp"))
        with private_postgres.connect() as locker:
            for _ in range(ROUNDS):
                with locker.transaction():
                    locker.execute(f"LOCK TABLE {SCHEMA}.tasks IN ACCESS EXCLUSIVE MODE")
                    # An id nobody created: a finished task once read is answered from memory.
                    socks = [hang_up_mid_query(served.port, unknown) for _ in range(PER_ROUND)]
                    eventually(
                        lambda: waiting_on_the_lock(private_postgres) >= PER_ROUND,
                        timeout=10,
                        what="every request's query to wait on the lock",
                    )
                    seen |= set(private_postgres.connections("aml-mcp"))
                    for sock in socks:
                        sock.shutdown(socket.SHUT_RDWR)  # the client hangs up while its query runs
                        sock.close()
                    time.sleep(0.3)  # the server notices each disconnect and cancels its handler
                eventually(lambda: waiting_on_the_lock(private_postgres) == 0, timeout=10, what="the queries")
        for _ in range(20):  # the pool serves again; any connection made since the hang-ups shows here
            assert get(client, task_id)["taskId"] == task_id
    seen |= set(private_postgres.connections("aml-mcp"))
    closed = [r.getMessage() for r in caplog.records if "closing connection" in r.getMessage()]
    print(f"{ROUNDS * PER_ROUND} hang-ups: {len(seen)} pool connections in all; psycopg closed {len(closed)}")
    assert not closed, closed[:3]
    assert len(seen) <= POOL, f"{len(seen)} connections for a pool of {POOL}: some replaced discarded ones"
