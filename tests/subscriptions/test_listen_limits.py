"""Listen limits (L7), over real HTTP with real tokens, and on the real task lookup.

Before, one principal could open streams until the server-wide limit (10,000), after which
`subscriptions/listen` failed for everyone, and a filter could name 1,000 task ids, each costing
store lookups (at the gate, then in the handler) before anything was refused. Now a caller holds
at most `max_listen_streams_per_principal` streams — the slot is taken before any lookup — and a
filter naming more than `MAX_TASK_IDS` ids is refused on its length alone.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_types import ClientCapabilities

from aml_mcp.catalog import ToolRegistry
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.persistence import LocalPersistence
from aml_mcp.principal import Principal
from aml_mcp.subscriptions.filters import MAX_TASK_IDS, accept
from aml_mcp.subscriptions.listen import listen_scope_rule
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.wiring import build_tasks
from tests.support.mcp_http import TASKS_EXTENSION, envelope, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.raw_http import request_bytes

WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}
PER_CALLER = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with (
        TestIssuer() as issuer,
        secured_server(
            tmp_path_factory.mktemp("listen-limits"),
            fixture_catalog(),
            issuer=issuer,
            max_listen_streams_per_principal=PER_CALLER,
            real_socket=True,
        ) as running,
    ):
        yield running


def listen_body(notifications: Any, request_id: Any = "s") -> dict[str, Any]:
    return message(
        "subscriptions/listen",
        {"notifications": notifications},
        request_id=request_id,
        capabilities=WITH_TASKS,
    )


@contextmanager
def open_stream(server: SecuredServer, token: str, request_id: Any) -> Iterator[socket.socket]:
    """A listen stream, acknowledged, held open until the block ends, then dropped by the client.

    A plain socket, so that leaving the block really closes the connection at once.
    """
    body = listen_body({"toolsListChanged": True}, request_id)
    headers = [*headers_for(body).items(), ("Authorization", f"Bearer {token}")]
    port = server.port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request_bytes(port, "POST", "/mcp", headers, json.dumps(body).encode()))
        received = b""
        while b"\r\n\r\n" not in received or b"acknowledged" not in received:
            chunk = sock.recv(65536)
            if not chunk:
                break
            received += chunk
            if received.startswith(b"HTTP/1.1 4"):
                break
        assert b"notifications/subscriptions/acknowledged" in received, received
        yield sock


def refused_listen(server: SecuredServer, token: str, notifications: Any) -> dict[str, Any]:
    body = listen_body(notifications)
    response = server.http.post(
        "/mcp", content=json.dumps(body), headers={**headers_for(body), "authorization": f"Bearer {token}"}
    )
    assert 400 <= response.status_code < 500, response.text
    error: dict[str, Any] = response.json()["error"]
    return error


def test_one_caller_cannot_hold_more_than_its_share_of_streams(server: SecuredServer) -> None:
    alice = server.mint(subject="alice")
    alice_again = server.mint(subject="alice", client_id="another-client")  # same caller, other client
    bob = server.mint(subject="bob")
    with ExitStack() as held:
        for index in range(PER_CALLER):
            held.enter_context(open_stream(server, alice, f"a{index}"))
        for token in (alice, alice_again):
            error = refused_listen(server, token, {"toolsListChanged": True})
            assert error["code"] == -32602
            assert "Too many open subscriptions for this caller" in error["message"]
        with open_stream(server, bob, "b0"):  # somebody else is not locked out
            pass
    # Closed streams give their slots back (the handler notices the disconnect asynchronously).
    deadline = time.monotonic() + 10
    while True:
        try:
            with open_stream(server, alice, "again"):
                break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_filter_naming_too_many_task_ids_is_refused_on_its_length(server: SecuredServer) -> None:
    token = server.mint(subject="carol")
    for ids in (
        [f"task-{index}" for index in range(MAX_TASK_IDS + 1)],
        [[index] for index in range(MAX_TASK_IDS + 1)],
    ):
        error = refused_listen(server, token, {"taskIds": ids})
        assert error["code"] == -32602
        assert f"at most {MAX_TASK_IDS}" in error["message"]
    assert MAX_TASK_IDS <= 100


class CountingLookup:
    """The real `FollowableTasks`, counting the lookups made through it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    async def followable(self, task_id: str, principal: Principal) -> frozenset[str] | None:
        self.calls += 1
        result: frozenset[str] | None = await self.inner.followable(task_id, principal)
        return result

    async def snapshot(self, task_id: str, principal: Principal) -> Any:
        self.calls += 1
        return await self.inner.snapshot(task_id, principal)

    async def scopes_to_follow(self, task_id: str, principal: Principal) -> frozenset[str]:
        self.calls += 1
        result: frozenset[str] = await self.inner.scopes_to_follow(task_id, principal)
        return result


@pytest.mark.anyio
async def test_an_oversized_filter_costs_no_lookup_at_the_gate_or_in_the_handler(tmp_path: Path) -> None:
    local = LocalPersistence(tmp_path)
    storage = local.tasks(poll_interval_ms=TaskSettings().poll_interval_ms, clock=None, observe=None)
    async with local.running():
        tasks = build_tasks(
            TaskSettings(),
            store=storage.store,
            clock=storage.clock,
            tools=ToolRegistry(),
            audit=lambda event: None,
        )
        lookup = CountingLookup(tasks.following)
        principal = Principal("https://issuer.example", "dave", "bank-a", "client")
        ids = [f"task-{index}" for index in range(MAX_TASK_IDS + 1)]
        params = {"notifications": {"taskIds": ids}, "_meta": envelope(WITH_TASKS)}

        assert await listen_scope_rule(lookup)(params, principal) == frozenset()
        with pytest.raises(Exception, match=f"at most {MAX_TASK_IDS}"):
            await accept(
                {"taskIds": ids},
                principal=principal,
                capabilities=ClientCapabilities.model_validate(WITH_TASKS),
                served=frozenset({"tools"}),
                resource_exists=None,
                tasks=lookup,
            )
        assert lookup.calls == 0

        # Within the limit, only ids that could be task ids are looked up, once each at the gate.
        mixed = ["\ud800", "x" * 300, "", "plain-id", "plain-id"]
        params = {"notifications": {"taskIds": mixed}, "_meta": envelope(WITH_TASKS)}
        assert await listen_scope_rule(lookup)(params, principal) == frozenset()
        assert lookup.calls == 1
