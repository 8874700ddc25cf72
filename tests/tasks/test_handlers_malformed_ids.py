"""Malformed task ids at `tasks/*` and in listen filters (F2, L1), over real HTTP and on the real rules.

Before, the gate's scope rules looked up whatever `taskId` a request carried: a lone surrogate made
the SQLite bind raise (a plain-text 500 from the gate, a traceback, no audit record), and a listen
filter item that was a list or an object raised `TypeError: unhashable`. Now the HTTP edge refuses
the surrogate (-32700, audited), and behind it the rules and the handlers never look up an id that
cannot be a task id: a wrong type is -32602, a string too long to be one is "Task not found".
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aml_mcp.catalog import ToolRegistry
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.persistence import LocalPersistence
from aml_mcp.principal import Principal
from aml_mcp.subscriptions.listen import listen_scope_rule
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.wiring import build_tasks
from tests.support.mcp_http import TASKS_EXTENSION, envelope, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}
METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with (
        TestIssuer() as issuer,
        secured_server(
            tmp_path_factory.mktemp("malformed-task-ids"), fixture_catalog(), issuer=issuer
        ) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def token(server: SecuredServer) -> str:
    return server.mint(subject="erin", scope="aml:read")


def call(server: SecuredServer, token: str, method: str, params: dict[str, Any], routed: str) -> Any:
    body = message(method, params, capabilities=WITH_TASKS)
    headers = {**headers_for(body, mcp_name=routed), "authorization": f"Bearer {token}"}
    return server.http.post("/mcp", content=json.dumps(body), headers=headers)


def task_params(method: str, task_id: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"taskId": task_id}
    if method == "tasks/update":
        params["inputResponses"] = {}
    return params


@pytest.mark.parametrize("method", METHODS)
def test_a_surrogate_task_id_is_refused_at_the_door_and_audited(
    server: SecuredServer, token: str, method: str
) -> None:
    mark = server.audit_mark()
    response = call(server, token, method, task_params(method, "\ud800abc"), routed="x")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700
    refusal = server.wait_for_audit(since=mark, reason="invalid_unicode")
    assert refusal["method"] == method and refusal["target"] == "\\ud800abc"


@pytest.mark.parametrize("method", METHODS)
def test_a_string_too_long_to_be_a_task_id_is_simply_not_found(
    server: SecuredServer, token: str, method: str
) -> None:
    long_id = "t" * 5000
    mark = server.audit_mark()
    response = call(server, token, method, task_params(method, long_id), routed=long_id)
    assert response.status_code < 500
    error = response.json()["error"]
    assert error["code"] == -32602 and error["message"] == "Task not found"
    assert server.wait_for_audit(since=mark, reason="not_found")["target"] == long_id[:8]


@pytest.mark.parametrize("task_id", [["a"], {"id": "a"}, 7, ""], ids=["list", "object", "number", "empty"])
@pytest.mark.parametrize("method", METHODS)
def test_a_task_id_of_the_wrong_type_is_invalid_params(
    server: SecuredServer, token: str, method: str, task_id: Any
) -> None:
    mark = server.audit_mark()
    response = call(server, token, method, task_params(method, task_id), routed="x")
    assert response.status_code < 500
    assert response.json()["error"]["code"] == -32602
    assert server.wait_for_audit(since=mark, method=method)["decision"] in ("allow", "deny")


@pytest.mark.parametrize("items", [[[]], [{}], [[1]], [1], [None], ["ok", {"nested": ["x"]}]], ids=str)
def test_listen_task_ids_that_are_not_strings_are_invalid_params_and_the_decision_is_audited(
    server: SecuredServer, token: str, items: list[Any]
) -> None:
    mark = server.audit_mark()
    response = call(server, token, "subscriptions/listen", {"notifications": {"taskIds": items}}, routed="x")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32602 and "taskIds must be a list" in error["message"]
    admitted = server.wait_for_audit(since=mark, method="subscriptions/listen")
    assert admitted["decision"] == "allow" and admitted["subject"] == "erin"


@pytest.mark.anyio
async def test_the_gate_rules_never_look_up_what_cannot_be_a_task_id(tmp_path: Path) -> None:
    """Behind the edge, on the real task store: no id that SQLite cannot bind ever reaches it."""
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
        principal = Principal("https://issuer.example", "erin", "bank-a", "client")
        meta = envelope(WITH_TASKS)
        for method in METHODS:
            rule = tasks.handlers.scope_rules[method]
            for task_id in ("\ud800", "a\udfffb", "x" * 5000, ["a"], {"a": 1}, ""):
                assert await rule({"taskId": task_id, "_meta": meta}, principal) == frozenset()
        listen = listen_scope_rule(tasks.following)
        items = ["\ud800", [], {}, [1], "x" * 5000, "", "unknown-id"]
        assert await listen({"notifications": {"taskIds": items}, "_meta": meta}, principal) == frozenset()
