"""A principal's task creates are limited over a window, finished tasks included (review 2, N11).

The review's reproduction: the caps on *unfinished* tasks did not stop one principal creating
hundreds of tasks that complete at once (861 in 25 s on PostgreSQL), each row kept for the TTL.
Here the same flood goes over real HTTP (uvicorn on 127.0.0.1, real signed tokens) to a server on
SQLite and to one on PostgreSQL: past the window's limit a create is refused with the quota error
(-32011, retryable, with a hint), audited, while a colleague at the same bank still creates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.protocol.errors import TOO_MANY_TASKS
from aml_mcp.tasks.settings import TaskSettings
from tests.support.mcp_http import call_tool, create, wait_for
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.postgres import BACKENDS, backend_settings

LIMIT = 5
WINDOW_SECONDS = 60


@pytest.fixture(params=BACKENDS)
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SecuredServer]:
    tasks = TaskSettings(
        poll_interval_ms=100,
        max_created_per_principal_per_window=LIMIT,
        create_window_seconds=WINDOW_SECONDS,
    )
    with (
        TestIssuer() as issuer,
        backend_settings(request.param) as backend,
        secured_server(
            tmp_path, fixture_catalog(), issuer=issuer, real_socket=True, tasks=tasks, **backend
        ) as running,
    ):
        yield running


def instant(client: httpx.Client, token: str, label: str) -> httpx.Response:
    """A task that completes at once (the review used `draft_sar_batch` on unknown case ids)."""
    return call_tool(client, "slow_compute", {"seconds": 0, "label": label}, token=token)


def test_a_flood_of_instant_tasks_is_refused_past_the_window_and_a_colleague_is_not(
    server: SecuredServer,
) -> None:
    alice = server.mint(subject="alice", tenant="bank-a", client_id="client-1")
    alice_elsewhere = server.mint(subject="alice", tenant="bank-a", client_id="client-2")
    bob = server.mint(subject="bob", tenant="bank-a", client_id="client-1")
    client = server.http
    created = [
        create(client, "slow_compute", {"seconds": 0, "label": f"n{i}"}, token=alice) for i in range(LIMIT)
    ]
    for task in created:  # every one finished: the caps on unfinished tasks have nothing to count
        assert wait_for(client, task["taskId"], "completed", token=alice)["status"] == "completed"

    mark = server.audit_mark()
    for token in (alice, alice_elsewhere):  # the same analyst through another client: same principal
        response = instant(client, token, "one too many")
        assert response.status_code == 200, response.text
        body = response.json()
        assert "result" not in body, body
        error = body["error"]
        assert error["code"] == TOO_MANY_TASKS
        assert f"at most {LIMIT} in {WINDOW_SECONDS} s" in error["message"]
        assert error["data"]["reason"] == "too_many_tasks" and error["data"]["retryable"] is True
        assert 0 < error["data"]["retryAfterMs"] <= WINDOW_SECONDS * 1000
    event = server.wait_for_audit(since=mark, method="tools/call", decision="deny", reason="too_many_tasks")
    assert event["subject"] == "alice" and event["tenant"] == "bank-a"

    colleague = create(client, "slow_compute", {"seconds": 0, "label": "bob"}, token=bob)
    assert wait_for(client, colleague["taskId"], "completed", token=bob)["status"] == "completed"
