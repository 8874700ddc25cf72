"""A replica out of database connections answers at once: 503 with `Retry-After` and a JSON-RPC
body, within about the pool's one-second wait, never after the ten seconds it used to queue.

On a PostgreSQL server of the test's own (`tests/support/private_postgres.py`): a replica with a
pool of two, over real HTTP. An administrative transaction holds `ACCESS EXCLUSIVE` on the tasks
table, so requests that read a task hang in the database holding their pooled connection (the slow
requests); once they hold every connection, the next request has none to wait for. When the lock
goes, the slow requests finish and the replica answers normally again. The reads name a task id
nobody created: a finished task, once read, is answered from the replica's memory (terminal rows
never change) and would not reach the database.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.live_server import LiveServer
from tests.support.mcp_http import create, task_request, wait_for
from tests.support.private_postgres import PrivatePostgres
from tests.support.settings import open_settings
from tests.support.waiting import eventually

pytestmark = [pytest.mark.faults]

SCHEMA = "t_pool"
POOL = 2


def waiting_on_the_lock(pg: PrivatePostgres) -> int:
    with pg.connect() as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'aml-mcp'"
            " AND wait_event_type = 'Lock'"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_replica_out_of_connections_answers_503_at_once(tmp_path: Path) -> None:
    with PrivatePostgres() as pg:
        settings = open_settings(
            tmp_path, database_url=pg.url, database_schema=SCHEMA, database_pool_size=POOL
        )
        with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
            with httpx.Client(base_url=live.url, timeout=30) as http:
                task_id = create(http, "slow_compute", {"seconds": 0})["taskId"]
                wait_for(http, task_id, "completed", within=15)
            slow: list[httpx.Response] = []
            unknown = secrets.token_urlsafe(24)

            def slow_get() -> None:
                with httpx.Client(base_url=live.url, timeout=60) as own:
                    slow.append(task_request(own, "tasks/get", unknown))

            with pg.connect() as admin, admin.transaction():
                admin.execute(f"LOCK TABLE {SCHEMA}.tasks IN ACCESS EXCLUSIVE MODE")
                holders = [threading.Thread(target=slow_get) for _ in range(POOL)]
                for thread in holders:
                    thread.start()
                eventually(
                    lambda: waiting_on_the_lock(pg),
                    until=lambda waiting: waiting >= POOL,
                    timeout=15,
                    what="every pooled connection held by a request waiting on the lock",
                )
                with httpx.Client(base_url=live.url, timeout=30) as http:
                    started = time.monotonic()
                    refused = task_request(http, "tasks/get", unknown)
                    elapsed = time.monotonic() - started
            for thread in holders:
                thread.join(30)
            print(f"\nout of connections: HTTP {refused.status_code} in {elapsed:.2f} s")
            assert elapsed < 2.5, elapsed
            assert refused.status_code == 503, refused.text
            assert int(refused.headers["retry-after"]) >= 1
            error = refused.json()["error"]
            assert error["code"] == -32010 and error["data"]["retryable"] is True, error
            # The lock is gone: the slow requests got their answers, and the replica serves again.
            assert [response.status_code for response in slow] == [400] * POOL  # answered: no such task
            assert all("not found" in response.json()["error"]["message"].lower() for response in slow)
            with httpx.Client(base_url=live.url, timeout=30) as http:
                assert task_request(http, "tasks/get", task_id).status_code == 200
