"""A `tasks/get` reads its task once: the gate's scope rule reads the whole task (it needs the
creating tool's scope) and the handler of the same request answers from that read, instead of
looking the task up a second time. Served by uvicorn on a real socket with authentication on, so
the request's context is the server's own; each lookup of the task service is counted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.tasks.service import TaskService
from tests.support.hold_tool import SCOPE, hold_catalog
from tests.support.mcp_http import WITH_TASKS, message, post
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with (
        TestIssuer() as issuer,
        secured_server(
            tmp_path, hold_catalog(), issuer=issuer, auth=auth_settings([issuer]), real_socket=True
        ) as served,
    ):
        yield served


@pytest.fixture
def lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every task lookup the service is asked for, by kind (the real lookups still run)."""
    seen: list[str] = []
    get, scope_of = TaskService.get, TaskService.scope_of

    async def counted_get(self: TaskService, *args: Any) -> Any:
        seen.append("get")
        return await get(self, *args)

    async def counted_scope_of(self: TaskService, *args: Any) -> Any:
        seen.append("scope_of")
        return await scope_of(self, *args)

    monkeypatch.setattr(TaskService, "get", counted_get)
    monkeypatch.setattr(TaskService, "scope_of", counted_scope_of)
    return seen


def _send(
    http: httpx.Client, token: str, method: str, params: dict[str, Any], **headers: str
) -> httpx.Response:
    return post(http, message(method, params, capabilities=WITH_TASKS), token=token, **headers)


def _get(http: httpx.Client, token: str, task_id: str) -> dict[str, Any]:
    answer = _send(http, token, "tasks/get", {"taskId": task_id})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_get_reads_its_task_once_and_a_foreign_get_once_too(
    server: SecuredServer, lookups: list[str]
) -> None:
    owner = server.mint(subject="alice", tenant="bank-a", client_id="c1", scope=SCOPE)
    other = server.mint(subject="bob", tenant="bank-b", client_id="c1", scope=SCOPE)
    created = _send(server.http, owner, "tools/call", {"name": "hold", "arguments": {}})
    task_id = created.json()["result"]["taskId"]
    lookups.clear()

    assert _get(server.http, owner, task_id)["result"]["taskId"] == task_id
    assert lookups == ["get"]

    lookups.clear()
    foreign = _send(server.http, other, "tasks/get", {"taskId": task_id})
    assert foreign.json()["error"] == {"code": -32602, "message": "Task not found"}
    assert lookups == ["get"]


def test_each_get_reads_the_task_as_it_is_now(server: SecuredServer, lookups: list[str]) -> None:
    """Two gets on one keep-alive connection, the task answered in between: the second sees the
    new state (nothing of the first request's read is kept for the next)."""
    owner = server.mint(subject="alice", tenant="bank-a", client_id="c1", scope=SCOPE)
    created = _send(server.http, owner, "tools/call", {"name": "hold", "arguments": {}})
    task_id = created.json()["result"]["taskId"]
    for _ in range(200):
        first = _get(server.http, owner, task_id)["result"]
        if first["status"] == "input_required":
            break
    assert first["status"] == "input_required"
    answered = _send(
        server.http,
        owner,
        "tasks/update",
        {"taskId": task_id, "inputResponses": {"go": {"action": "accept", "content": {"go": True}}}},
    )
    assert answered.status_code == 200, answered.text
    lookups.clear()
    gets = 0
    for _ in range(200):
        now = _get(server.http, owner, task_id)["result"]
        gets += 1
        if now["status"] == "completed":
            break
    assert now["status"] == "completed"
    assert lookups == ["get"] * gets  # one read per get, none apart at the gate
