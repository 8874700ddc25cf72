"""Cross-principal isolation over HTTP (in-process) with real tokens (auth on, JWTs from real issuers).

30 callers — 3 subjects x 3 tenants x 3 clients, two whose `client_id|sub` would join to the same
string, and one that differs from another only by issuer — each own one task waiting for input.
Every foreign `tasks/get`, `tasks/update` and `tasks/cancel` must be answered exactly like an
unknown id and change nothing; the owner must still hold the creating tool's scope.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.asgi import InProcessServer
from tests.support.hold_tool import SCOPE, hold_catalog
from tests.support.mcp_http import WITH_TASKS, accept, headers_for, message, post
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server
from tests.support.postgres import BACKENDS, backend_settings
from tests.support.waiting import eventually

NOT_FOUND = {"code": -32602, "message": "Task not found"}


@dataclass(frozen=True)
class Caller:
    label: str
    issuer: TestIssuer
    subject: str
    tenant: str
    client_id: str
    token: str


@dataclass
class World:
    server: SecuredServer
    callers: list[Caller]
    tasks: dict[str, str]
    """Caller label → the id of the task it created."""

    def send(self, token: str, method: str, params: dict[str, Any], **headers: str | None) -> httpx.Response:
        body = message(method, params, capabilities=WITH_TASKS)
        return post(self.server.http, body, token=token, **headers)

    async def send_lean(self, token: str, method: str, params: dict[str, Any]) -> tuple[int, Any]:
        """The same request handed straight to the in-process app, on its loop (httpx would cost more
        than the server it talks to, and the matrix sends thousands of requests): status and error."""
        served = self.server.served
        assert isinstance(served, InProcessServer)
        body = message(method, params, capabilities=WITH_TASKS)
        headers = {**headers_for(body), "authorization": f"Bearer {token}"}
        status, content = await served.exchange("POST", "/mcp", headers, json.dumps(body).encode())
        return status, json.loads(content).get("error")

    def token(self, caller: Caller, scope: str) -> str:
        """A new token for the same principal with other scopes."""
        return caller.issuer.mint(
            audience=self.server.resource,
            subject=caller.subject,
            tenant=caller.tenant,
            client_id=caller.client_id,
            scope=scope,
        )


def _caller(
    server: SecuredServer, label: str, issuer: TestIssuer, subject: str, tenant: str, client_id: str
) -> Caller:
    token = issuer.mint(
        audience=server.resource, subject=subject, tenant=tenant, client_id=client_id, scope=SCOPE
    )
    return Caller(label, issuer, subject, tenant, client_id, token)


def _callers(server: SecuredServer, first: TestIssuer, second: TestIssuer) -> list[Caller]:
    callers = [
        _caller(server, f"{s}/{t}/{c}", first, s, t, c)
        for s, t, c in itertools.product(
            ("alice", "bob", "carol"), ("bank-a", "bank-b", "bank-c"), ("c1", "c2", "c3")
        )
    ]
    callers.append(_caller(server, "sub y|z, client x", first, "y|z", "bank-a", "x"))
    callers.append(_caller(server, "sub z, client x|y", first, "z", "bank-a", "x|y"))
    callers.append(_caller(server, "alice/bank-a/c1 of the second issuer", second, "alice", "bank-a", "c1"))
    return callers


@pytest.fixture(scope="module", params=BACKENDS)
def world(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[World]:
    """The isolation matrix runs on SQLite and on PostgreSQL."""
    data_dir: Path = tmp_path_factory.mktemp("isolation")
    with TestIssuer() as first, TestIssuer() as second, backend_settings(request.param) as backend:
        auth = auth_settings([first, second])
        with secured_server(data_dir, hold_catalog(), auth=auth, **backend) as server:
            world = World(server, _callers(server, first, second), {})
            for caller in world.callers:
                created = world.send(caller.token, "tools/call", {"name": "hold", "arguments": {}})
                assert created.status_code == 200, created.text
                world.tasks[caller.label] = created.json()["result"]["taskId"]
            yield world


def _state(world: World, caller: Caller) -> dict[str, Any]:
    task_id = world.tasks[caller.label]

    def poll() -> dict[str, Any]:
        response = world.send(caller.token, "tasks/get", {"taskId": task_id})
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]
        return result

    result = eventually(
        poll, until=lambda r: r["status"] == "input_required", what="the task to ask for input"
    )
    result.pop("_meta", None)
    return result


@pytest.mark.slow
def test_every_foreign_request_is_refused_like_an_unknown_id_and_changes_nothing(world: World) -> None:
    assert len(world.callers) == 30
    before = {caller.label: _state(world, caller) for caller in world.callers}
    unknown = world.send(world.callers[0].token, "tasks/get", {"taskId": "Q" * 32})
    assert unknown.status_code == 400 and unknown.json()["error"] == NOT_FOUND

    async def probe(slots: asyncio.Semaphore, owner: Caller, intruder: Caller) -> list[tuple[str, int, Any]]:
        task_id = world.tasks[owner.label]
        outcomes = []
        async with slots:
            for method, extra in (
                ("tasks/get", {}),
                ("tasks/update", {"inputResponses": {"go": accept(go=True)}}),
                ("tasks/cancel", {}),
            ):
                status, error = await world.send_lean(intruder.token, method, {"taskId": task_id, **extra})
                outcomes.append((f"{intruder.label} {method} on {owner.label}", status, error))
        return outcomes

    async def probe_all() -> list[list[tuple[str, int, Any]]]:
        slots = asyncio.Semaphore(4)  # four intruders at a time
        return await asyncio.gather(*(probe(slots, owner, intruder) for owner, intruder in pairs))

    pairs = [(owner, intruder) for owner in world.callers for intruder in world.callers if owner != intruder]
    served = world.server.served
    assert isinstance(served, InProcessServer)
    results = [outcome for batch in served.run(probe_all) for outcome in batch]
    assert len(results) == 30 * 29 * 3
    wrong = [r for r in results if r[1:] != (400, NOT_FOUND)]
    assert wrong == []

    for caller in world.callers:
        assert _state(world, caller) == before[caller.label], caller.label


def test_the_owner_needs_the_creating_tools_scope_on_every_request(world: World) -> None:
    owner, stranger = world.callers[0], world.callers[5]
    task_id = world.tasks[owner.label]
    for method, extra in (("tasks/get", {}), ("tasks/update", {"inputResponses": {}}), ("tasks/cancel", {})):
        weak = world.send(world.token(owner, "aml:read"), method, {"taskId": task_id, **extra})
        assert weak.status_code == 403, weak.text
        assert 'error="insufficient_scope"' in weak.headers["www-authenticate"]
        # A stranger without the scope learns nothing either: an id it does not own needs no scope.
        foreign = world.send(world.token(stranger, "aml:read"), method, {"taskId": task_id, **extra})
        assert foreign.status_code == 400 and foreign.json()["error"] == NOT_FOUND
    assert _state(world, owner)["status"] == "input_required"


def test_denials_are_audited_without_values_or_tokens(world: World) -> None:
    owner, intruder = world.callers[1], world.callers[2]
    task_id = world.tasks[owner.label]
    mark = world.server.audit_mark()
    secret_answer = accept(go=True, note="confidential-answer-value")
    world.send(intruder.token, "tasks/update", {"taskId": task_id, "inputResponses": {"go": secret_answer}})
    event = world.server.wait_for_audit(
        since=mark,
        method="tasks/update",
        decision="deny",
        subject=intruder.subject,
        tenant=intruder.tenant,
        client_id=intruder.client_id,
        target=task_id[:8],
    )
    assert event["reason"] == "not_found" and event["issuer"] == intruder.issuer.issuer
    trail = world.server.audit(since=mark)
    flat = json.dumps(trail)
    assert "confidential-answer-value" not in flat and intruder.token not in flat
    task_events = [e for e in trail if e["method"] == "tasks/update" and e["reason"] != "ok"]
    assert task_events and all(task_id not in json.dumps(e) for e in task_events)


def test_the_owner_can_answer_and_complete(world: World) -> None:
    owner = world.callers[-1]
    task_id = world.tasks[owner.label]
    answered = world.send(
        owner.token, "tasks/update", {"taskId": task_id, "inputResponses": {"go": accept(go=True)}}
    )
    assert answered.status_code == 200
    state = eventually(
        lambda: world.send(owner.token, "tasks/get", {"taskId": task_id}).json()["result"],
        until=lambda s: s["status"] == "completed",
        what="the owner's task to complete",
    )
    assert state["status"] == "completed"
