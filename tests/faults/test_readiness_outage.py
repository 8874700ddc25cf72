"""`/readyz` answers within 500 ms while PostgreSQL is down, and says ready again once it is back (D9).

The review saw every replica's and worker's `/readyz` take over two seconds from a few seconds
after PostgreSQL stopped until it started again: its probes ran one after another, the shared
store's waiting up to ten seconds for a pooled connection and the notes' in a blocking connect.
Here an app serving the AML tools (notes, audit trail, tasks, all on a private server) is polled
over HTTP while that server is stopped; every answer must come within 500 ms, as a 503 naming the
shared store.
"""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from aml_mcp.app import build_app
from tests.support.live_server import LiveServer
from tests.support.postgres import new_schema_name
from tests.support.private_postgres import PrivatePostgres
from tests.support.settings import open_settings
from tests.support.waiting import eventually

pytestmark = pytest.mark.faults

AML = {"embedder": "static", "reembed_in_background": False, "demo_notes_per_tenant": 5}


def test_readyz_answers_within_500_ms_while_the_database_is_down_and_recovers(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    settings = open_settings(
        tmp_path, database_url=private_postgres.url, database_schema=new_schema_name(), aml=AML
    )
    with (
        LiveServer(build_app(settings), startup_timeout=60) as live,
        httpx.Client(base_url=live.url, timeout=10) as client,
    ):
        eventually(lambda: client.get("/readyz").status_code == 200, timeout=30, what="ready at start")
        private_postgres.stop()
        answers: list[tuple[float, int, list[str]]] = []
        try:
            deadline = time.monotonic() + 8
            while time.monotonic() < deadline:
                started = time.perf_counter()
                response = client.get("/readyz")
                answers.append(
                    (time.perf_counter() - started, response.status_code, response.json().get("reasons", []))
                )
                time.sleep(0.1)
        finally:
            private_postgres.start()
        eventually(lambda: client.get("/readyz").status_code == 200, timeout=60, what="ready once it is back")
    slowest = max(seconds for seconds, _, _ in answers)
    assert slowest < 0.5, f"/readyz took {slowest * 1000:.0f} ms while the database was down"
    # Within a second of the stop every answer says the shared store is unavailable.
    settled = answers[10:]
    assert settled and all(status == 503 for _, status, _ in settled), answers
    assert all("shared_store_unavailable" in reasons for _, _, reasons in settled), answers
