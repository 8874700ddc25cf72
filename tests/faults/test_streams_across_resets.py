"""Listen streams on every replica get every final state across a reset of every connection (D2).

Two app instances (replicas) share one schema of a private PostgreSQL server: one runs the task
bodies, the other only answers requests. Streams held on both follow twelve tasks that complete
over about three seconds; just before the first completion every aml-mcp connection (pools,
listeners, audit) is terminated. Before the fix, a replica's listener reconnected and ran its
resync on pooled connections that had died too: the resync failed once and counted as done, and
notified tasks whose lookup failed were dropped, so streams waited for final states the table
already held (the review: 7 of 12 streams missed 1 to 3; here half the streams missed 2 of 12).

The second test keeps a resync failing (the tasks table renamed away, the listener connection
terminated; the stream follows a task still running, since a finished one is re-read from memory)
and sees the stream closed with `resync_failed` once `listen.catch_up_seconds` have passed, so its
client reconnects, and the new stream starts with the current state. Before, the
failed resync was logged once and the stream stayed open, behind, with nothing more to come.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg import sql

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.subscriptions.listen import CLOSE_REASON_KEY
from aml_mcp.subscriptions.postgres_bus import listener_name
from tests.support.live_server import LiveServer
from tests.support.mcp_http import TASKS_ONLY, create, get, headers_for, message
from tests.support.postgres import new_schema_name
from tests.support.private_postgres import PrivatePostgres
from tests.support.settings import open_settings
from tests.support.sse import SseReader

pytestmark = pytest.mark.faults

TERMINAL = ("completed", "failed", "cancelled")


@contextmanager
def listening(client: httpx.Client, task_ids: list[str]) -> Iterator[SseReader]:
    body = message("subscriptions/listen", {"notifications": {"taskIds": task_ids}}, capabilities=TASKS_ONLY)
    with client.stream("POST", "/mcp", content=json.dumps(body), headers=headers_for(body)) as response:
        assert response.status_code == 200, response.read()
        reader = SseReader(response)
        ack = reader.next()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged", ack
        yield reader


def final_states(stream: SseReader, task_ids: list[str], seen: dict[str, str], timeout: float) -> None:
    """Reads `stream` into `seen` (task id -> last status) until every task is terminal."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all(seen.get(t) in TERMINAL for t in task_ids):
        try:
            note = stream.next(timeout=max(0.05, deadline - time.monotonic()))
        except TimeoutError:
            return
        if note is None:
            return
        if note.get("method") == "notifications/tasks":
            seen[note["params"]["taskId"]] = note["params"]["status"]


@contextmanager
def replicas(
    pg: PrivatePostgres, tmp_path: Path, schema: str, **settings: Any
) -> Iterator[list[httpx.Client]]:
    """Two app instances on `schema`: the first runs task bodies, the second only answers."""
    common = {"database_url": pg.url, "database_schema": schema, **settings}
    with ExitStack() as stack:
        clients = []
        for name, role in (("a", "all"), ("b", "api")):
            app = build_app(open_settings(tmp_path / name, role=role, **common), catalog=fixture_catalog())
            live = stack.enter_context(LiveServer(app))
            timeout = httpx.Timeout(10, read=60)
            clients.append(stack.enter_context(httpx.Client(base_url=live.url, timeout=timeout)))
        yield clients


def test_every_stream_on_every_replica_gets_every_final_state_across_a_reset(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    with replicas(private_postgres, tmp_path, new_schema_name()) as clients, ExitStack() as held:
        seconds = [2.0 + 0.25 * index for index in range(12)]
        task_ids = [
            create(clients[index % 2], "slow_compute", {"seconds": s, "label": str(index)})["taskId"]
            for index, s in enumerate(seconds)
        ]
        started = time.monotonic()
        streams = [held.enter_context(listening(clients[n % 2], task_ids)) for n in range(6)]
        # Each replica's pool holds several connections, every one of which the reset kills.
        for client in clients:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(lambda task_id, c=client: get(c, task_id), task_ids * 2))
        time.sleep(max(0.0, started + 1.8 - time.monotonic()))
        killed = private_postgres.terminate_all()
        seen: list[dict[str, str]] = [{} for _ in streams]
        readers = [
            threading.Thread(target=final_states, args=(stream, task_ids, seen[n], 40))
            for n, stream in enumerate(streams)
        ]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join()
    assert killed >= 10, f"the reset ended only {killed} connections"
    missed = {n: [t for t in task_ids if states.get(t) != "completed"] for n, states in enumerate(seen)}
    assert missed == {n: [] for n in range(len(streams))}, f"final states missed per stream: {missed}"


def test_a_stream_that_cannot_be_caught_up_is_closed_and_its_reconnect_starts_with_the_state(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    schema = new_schema_name()
    with replicas(private_postgres, tmp_path, schema, listen={"catch_up_seconds": 1.0}) as (a, b):
        # A task still running: a finished one is re-read from the replica's memory (terminal rows
        # never change), so its resync would succeed without the table.
        task_id = create(a, "slow_compute", {"seconds": 60, "label": "running"})["taskId"]
        with listening(b, [task_id]) as stream:
            first = stream.next()
            assert first is not None and first["params"]["status"] == "working"
            tasks = sql.Identifier(schema, "tasks")
            with private_postgres.connect() as admin:
                admin.execute(sql.SQL("ALTER TABLE {} RENAME TO tasks_away").format(tasks))
                # Only the listeners: the bus reconnects and owes a resync it cannot do.
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                    (listener_name(schema),),
                )
            try:
                rest = stream.rest(timeout=15)
            finally:
                with private_postgres.connect() as admin:
                    away = sql.Identifier(schema, "tasks_away")
                    admin.execute(sql.SQL("ALTER TABLE {} RENAME TO tasks").format(away))
        result = rest[-1] if rest else {}
        assert result.get("result", {}).get("_meta", {}).get(CLOSE_REASON_KEY) == "resync_failed", rest
        with listening(b, [task_id]) as again:
            current = again.next()
            assert current is not None and current["params"]["status"] == "working"
