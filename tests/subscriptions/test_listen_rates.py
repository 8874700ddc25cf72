"""Per-caller listen rates (D6): the buckets, the refusal over real HTTP with real tokens, and that a
refused listen costs no task lookup.

A caller (issuer and subject) may make `listen.connects_burst` listen requests back to back, then
`listen.connects_per_second`; and its streams may be sent `listen.state_bytes_burst` bytes of
current state back to back, then `listen.state_bytes_per_second`. Past either, a listen is refused
with 429, `Retry-After` and a retryable JSON-RPC error (-32012), audited, and held back up to a
second; other callers are not affected.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.catalog import ToolRegistry
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.persistence import LocalPersistence
from aml_mcp.principal import Principal
from aml_mcp.subscriptions.listen import listen_scope_rule
from aml_mcp.subscriptions.rates import TOO_MANY_LISTENS, ListenRates
from aml_mcp.subscriptions.settings import ListenSettings
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.wiring import build_tasks
from tests.subscriptions.test_listen_limits import CountingLookup
from tests.support.mcp_http import TASKS_EXTENSION, envelope, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, audit_events, secured_server, wait_for_audit

WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
ALICE = Principal("https://issuer.example", "alice", "bank-a", "copilot")
ALICE_OTHER_CLIENT = Principal("https://issuer.example", "alice", "bank-a", "another-client")
BOB = Principal("https://issuer.example", "bob", "bank-b", "copilot")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_connects_beyond_the_burst_wait_for_the_refill_per_caller() -> None:
    clock = Clock()
    rates = ListenRates(ListenSettings(connects_burst=3, connects_per_second=0.5), clock=clock)
    assert [rates.admit(ALICE) for _ in range(3)] == [None, None, None]
    assert rates.admit(ALICE_OTHER_CLIENT) == pytest.approx(2.0), "another client of the same caller"
    assert rates.admit(BOB) is None, "another caller has a bucket of its own"
    assert not rates.would_admit(ALICE)
    clock.now += 1.0
    assert rates.admit(ALICE) == pytest.approx(1.0)
    clock.now += 1.0
    assert rates.would_admit(ALICE) and rates.admit(ALICE) is None
    assert rates.refused == 2


def test_current_state_sent_is_charged_and_a_debt_must_be_repaid_first() -> None:
    clock = Clock()
    settings = ListenSettings(state_bytes_burst=1_000_000, state_bytes_per_second=100_000)
    rates = ListenRates(settings, clock=clock)
    assert rates.admit(ALICE) is None
    rates.charge(ALICE, 1_500_000)  # one large reconnect: half a megabyte in debt
    assert rates.admit(ALICE) == pytest.approx(5.0, abs=0.01)
    clock.now += 5.0
    assert rates.admit(ALICE) is None


@pytest.mark.anyio
async def test_the_scope_rule_looks_nothing_up_for_a_caller_past_its_rate(tmp_path: Path) -> None:
    local = LocalPersistence(tmp_path)
    storage = local.tasks(poll_interval_ms=TaskSettings().poll_interval_ms, clock=None, observe=None)
    async with local.running():
        tasks = build_tasks(
            TaskSettings(),
            store=storage.store,
            clock=storage.clock,
            tools=ToolRegistry(),
            audit=lambda e: None,
        )
        lookup = CountingLookup(tasks.following)
        rates = ListenRates(ListenSettings(connects_burst=1))
        params = {"notifications": {"taskIds": ["t1", "t2", "t3"]}, "_meta": envelope(WITH_TASKS)}
        rule = listen_scope_rule(lookup, rates)
        await rule(params, ALICE)
        assert lookup.calls == 3
        assert rates.admit(ALICE) is None
        await rule(params, ALICE)
        assert lookup.calls == 3, "refused right after the gate: no lookup for it"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with (
        TestIssuer() as issuer,
        secured_server(
            tmp_path_factory.mktemp("listen-rates"),
            fixture_catalog(),
            issuer=issuer,
            listen={"connects_burst": 2, "connects_per_second": 0.5},
            real_socket=True,
        ) as running,
    ):
        yield running


def listen(server: SecuredServer, token: str, request_id: Any) -> httpx.Response:
    """A listen request; an accepted stream is hung up on once its first message arrived."""
    body = message(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id=request_id
    )
    headers = {**headers_for(body), "authorization": f"Bearer {token}"}
    with server.http.stream("POST", "/mcp", content=json.dumps(body), headers=headers) as response:
        if response.status_code == 200:
            next(response.iter_lines())
        else:
            response.read()
    return response


def test_a_listen_past_the_rate_is_refused_429_retryable_and_audited(server: SecuredServer) -> None:
    carol, dave = server.mint(subject="carol"), server.mint(subject="dave")
    for n in range(2):
        assert listen(server, carol, f"ok-{n}").status_code == 200
    started = time.monotonic()
    refused = listen(server, carol, "too-soon")
    held = time.monotonic() - started
    assert refused.status_code == 429, refused.text
    assert refused.headers["content-type"] == "application/json"
    assert int(refused.headers["retry-after"]) >= 1
    error = refused.json()["error"]
    assert refused.json()["id"] == "too-soon"
    assert error["code"] == TOO_MANY_LISTENS
    assert error["data"]["reason"] == "too_many_listens" and error["data"]["retryable"] is True
    assert error["data"]["retryAfterMs"] > 0
    assert 0.5 <= held < 5, f"the refusal was held back {held:.2f} s"
    assert listen(server, dave, "someone-else").status_code == 200
    wait_for_audit(server.settings, reason="too_many_listens", subject="carol")
    assert not audit_events(server.settings, reason="too_many_listens", subject="dave")
