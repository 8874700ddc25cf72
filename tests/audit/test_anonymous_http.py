"""Over real HTTP: a flood of anonymous refusals adds a handful of counted records, not one each (M9).

Meanwhile every allowed call and every refusal of a verified caller keeps its own record.
"""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tests.support.audit_trail import call_body, event_count, jsonl_events, raw_post, read_catalog
from tests.support.oauth import TestIssuer, audit_events, secured_server

FLOOD = 1000
THREADS = 8


def test_a_thousand_identical_anonymous_401s_make_a_handful_of_records(tmp_path: Path) -> None:
    with (
        TestIssuer() as issuer,
        secured_server(tmp_path, read_catalog(), issuer=issuer, real_socket=True) as server,
    ):

        def flood(share: int) -> list[int]:
            with httpx.Client(base_url=server.url, timeout=15) as http:
                return [raw_post(http, call_body(), name="probe_read").status_code for _ in range(share)]

        start = time.monotonic()
        with ThreadPoolExecutor(THREADS) as pool:
            statuses = pool.map(flood, [FLOOD // THREADS] * THREADS)
            for n in range(20):  # verified callers, at the same time
                alice = server.mint(subject="alice", scope="aml:read", jti=f"alice-{n}")
                bob = server.mint(subject="bob", scope="aml:eval", jti=f"bob-{n}")
                assert raw_post(server.http, call_body(), token=alice, name="probe_read").status_code == 200
                assert raw_post(server.http, call_body(), token=bob, name="probe_read").status_code == 403
            assert [s for batch in statuses for s in batch] == [401] * FLOOD
        elapsed = time.monotonic() - start
        audit = getattr(server.served.app.state, "audit", None)
    # The server has stopped: the audit log closed, writing the summaries of open windows.

    windows = math.ceil(elapsed / 1.0) + 1  # the default window is 1 s
    for copy in (audit_events(tmp_path), jsonl_events(tmp_path)):
        flood_records = [e for e in copy if e["reason"] == "no_token"]
        assert sum(event_count(e) for e in flood_records) == FLOOD
        assert len(flood_records) <= 2 * windows, (len(flood_records), elapsed)
        assert all(e["target"] == "probe_read" and e["subject"] is None for e in flood_records)
        allowed = [e["token_id"] for e in copy if e["decision"] == "allow"]
        assert allowed == [f"alice-{n}" for n in range(20)]
        refused = [e["token_id"] for e in copy if e["reason"] == "insufficient_scope"]
        assert refused == [f"bob-{n}" for n in range(20)]
    assert audit is not None
    stats = audit.stats()
    assert stats.folded == FLOOD - len(
        [e for e in audit_events(tmp_path) if e["reason"] == "no_token" and not e["detail"]]
    )
