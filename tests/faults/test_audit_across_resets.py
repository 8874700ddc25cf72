"""D4: a connection reset costs the audit trail a retry, not an outage.

The trail fails closed (a decision that cannot be recorded is not made), and it writes over one
connection of its own. Before the fix, a reset of every aml-mcp connection made the next batch fail
on that dead connection, the trail was declared unavailable and every request was refused (503)
until the retry after the backoff — the review saw 129 of 300 creates refused during 3 resets. Now
the batch is retried at once on a fresh connection: audited requests sent right after the reset all
succeed, and the trail keeps the record of every one of them. While the database is really down
the retry fails too and requests are refused, each with `Retry-After` and a JSON-RPC body.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server
from tests.support.private_postgres import PrivatePostgres

pytestmark = pytest.mark.faults

SCHEMA = "d4_audit"


@pytest.fixture(scope="module")
def server(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("d4"),
        fixture_catalog(),
        issuer=issuer,
        # The production flush interval: a failed batch's backoff is as long as it is in production.
        auth=auth_settings([issuer], audit_flush_seconds=0.1),
        real_socket=True,
        database_url=private_postgres.url,
        database_schema=SCHEMA,
    ) as served:
        yield served


def listed(server: SecuredServer, token: str) -> int:
    return server.post("tools/list", token=token).status_code


def test_audited_requests_right_after_a_reset_succeed_and_are_all_recorded(
    server: SecuredServer, private_postgres: PrivatePostgres
) -> None:
    token = server.mint(subject="d4-after-reset")
    assert listed(server, token) == 200
    mark = server.audit_mark()  # the trail's connection is open and idle now
    statuses: list[int] = []
    for _ in range(3):
        assert private_postgres.terminate_all("aml-mcp-audit%") == 1
        until = time.monotonic() + 0.6  # several flushes: each batch meets the dead connection first
        while time.monotonic() < until:
            statuses.append(listed(server, token))
    assert server.audit_log is not None
    server.audit_log.flush()
    allowed = server.audit(since=mark, subject="d4-after-reset", method="tools/list", decision="allow")
    refused = [status for status in statuses if status != 200]
    print(f"{len(statuses)} requests after 3 resets: {len(refused)} refused {sorted(set(refused))}")
    assert not refused
    assert len(allowed) == len(statuses)  # the record of every request is in the trail, none twice


def test_while_the_database_is_down_requests_are_refused_with_retry_after(
    server: SecuredServer, private_postgres: PrivatePostgres
) -> None:
    token = server.mint(subject="d4-stopped")
    assert listed(server, token) == 200
    private_postgres.stop()
    try:
        deadline = time.monotonic() + 10
        response = server.post("tools/list", token=token)
        while response.status_code == 200 and time.monotonic() < deadline:
            time.sleep(0.05)
            response = server.post("tools/list", token=token)
    finally:
        private_postgres.start()
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"].isdigit()
    assert response.json()["error"]["message"].startswith("Service unavailable: the audit trail")
    # Back up: requests are admitted again without a restart.
    deadline = time.monotonic() + 15
    while listed(server, token) != 200:
        assert time.monotonic() < deadline, "the trail did not recover within 15 s of the restart"
        time.sleep(0.1)
