"""One audit record per decision, over real HTTP: a `tasks/get`, `tasks/update` or `tasks/cancel` leaves
exactly one record, the handler's (found or not, answers taken, cancel requested), carrying the
client's trace id the gate saw; before, the gate's `allow ok` came first, so every poll wrote two rows
and a foreign task's lookup an `allow ok` beside its `deny not_found`.

A request the gate admits but the protocol layer refuses before any handler (a `tasks/get` whose
`Mcp-Method` header names another method) still leaves its allow: nothing admitted goes unrecorded.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from aml_mcp.audit.decisions import DECIDED_BY_HANDLER
from aml_mcp.catalog import Catalog
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec
from aml_mcp.tasks.handlers import TASK_METHODS
from tests.support.hold_tool import SCOPE, hold_catalog
from tests.support.mcp_http import WITH_TASKS, accept, message, post, wait_for
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.waiting import eventually

TRACE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _catalog() -> Catalog:
    """`hold` (a task tool) and `ping`, a tool of the same scope that answers at once."""

    async def ping(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text="pong")])

    catalog = hold_catalog()
    catalog.tools.add(
        ToolSpec(
            name="ping",
            description="Answers at once.",
            input_schema={"type": "object"},
            body=ping,
            execution=Execution.SYNC,
            scope=SCOPE,
        )
    )
    return catalog


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("one-record")
    with secured_server(data_dir, _catalog(), issuer=issuer, real_socket=True) as running:
        yield running


def _send(server: SecuredServer, token: str, method: str, params: dict[str, Any], **headers: str) -> Any:
    body = message(method, params, capabilities=WITH_TASKS, **{"traceparent": TRACE})
    response = post(server.http, body, token=token, **headers)
    return response


def _records_of(server: SecuredServer, mark: int, method: str, count: int) -> list[dict[str, Any]]:
    """The trail's records of `method` after `mark`, once `count` of them (and anything late) are in."""
    eventually(
        lambda: server.audit(since=mark, method=method),
        until=lambda rows: len(rows) >= count,
        timeout=5,
        what=f"{count} audit record(s) of {method}",
    )
    server.audit_mark()  # flushes whatever else the request recorded
    return server.audit(since=mark, method=method)


def _task(server: SecuredServer, token: str) -> str:
    created = _send(server, token, "tools/call", {"name": "hold", "arguments": {}})
    assert created.status_code == 200, created.text
    task_id: str = created.json()["result"]["taskId"]
    wait_for(server.http, task_id, "input_required", token=token)
    return task_id


def test_the_handlers_methods_are_the_ones_whose_allow_waits_for_them() -> None:
    assert frozenset({*TASK_METHODS, "tools/call"}) == DECIDED_BY_HANDLER


def test_a_task_create_leaves_exactly_one_record_the_handlers(server: SecuredServer) -> None:
    """Before, the gate's `allow ok` of the `tools/call` came first and the handler's `task_created`
    after it: two rows for every create."""
    token = server.mint(subject="ana", tenant="bank-a", client_id="creator", scope=SCOPE)
    mark = server.audit_mark()
    task_id = _task(server, token)
    [record] = _records_of(server, mark, "tools/call", 1)
    assert (record["decision"], record["reason"], record["subject"]) == ("allow", "task_created", "ana")
    assert record["target"] == task_id[:8]
    assert record["detail"] == {"trace_id": TRACE.split("-")[1], "tool": "hold"}


def test_a_tool_that_answers_at_once_leaves_the_gates_allow(server: SecuredServer) -> None:
    token = server.mint(subject="ana", tenant="bank-a", client_id="pinger", scope=SCOPE)
    mark = server.audit_mark()
    response = _send(server, token, "tools/call", {"name": "ping", "arguments": {}})
    assert response.status_code == 200 and response.json()["result"]["content"][0]["text"] == "pong"
    [record] = _records_of(server, mark, "tools/call", 1)
    assert (record["decision"], record["reason"], record["subject"]) == ("allow", "ok", "ana")


def test_one_tasks_get_leaves_exactly_one_record(server: SecuredServer) -> None:
    token = server.mint(subject="ana", tenant="bank-a", client_id="copilot", scope=SCOPE)
    task_id = _task(server, token)
    mark = server.audit_mark()
    response = _send(server, token, "tasks/get", {"taskId": task_id})
    assert response.status_code == 200 and response.json()["result"]["status"] == "input_required"
    [record] = _records_of(server, mark, "tasks/get", 1)
    assert (record["decision"], record["reason"], record["subject"]) == ("allow", "ok", "ana")
    assert record["target"] == task_id[:8]
    assert record["detail"] == {"trace_id": TRACE.split("-")[1], "tool": "hold"}


def test_a_foreign_tasks_get_leaves_one_deny_and_no_allow(server: SecuredServer) -> None:
    owner = server.mint(subject="ana", tenant="bank-a", client_id="copilot", scope=SCOPE)
    stranger = server.mint(subject="bo", tenant="bank-b", client_id="copilot", scope=SCOPE)
    task_id = _task(server, owner)
    mark = server.audit_mark()
    response = _send(server, stranger, "tasks/get", {"taskId": task_id})
    assert response.status_code == 400 and response.json()["error"]["message"] == "Task not found"
    [record] = _records_of(server, mark, "tasks/get", 1)
    assert (record["decision"], record["reason"], record["subject"]) == ("deny", "not_found", "bo")


def test_update_and_cancel_each_leave_exactly_one_record(server: SecuredServer) -> None:
    token = server.mint(subject="ana", tenant="bank-a", client_id="notebook", scope=SCOPE)
    answered = _task(server, token)
    mark = server.audit_mark()
    update = _send(
        server, token, "tasks/update", {"taskId": answered, "inputResponses": {"go": accept(go=True)}}
    )
    assert update.status_code == 200, update.text
    [record] = _records_of(server, mark, "tasks/update", 1)
    assert (record["decision"], record["reason"]) == ("allow", "answers_accepted")

    cancelled = _task(server, token)
    mark = server.audit_mark()
    cancel = _send(server, token, "tasks/cancel", {"taskId": cancelled})
    assert cancel.status_code == 200, cancel.text
    [record] = _records_of(server, mark, "tasks/cancel", 1)
    assert (record["decision"], record["reason"]) == ("allow", "cancel_requested")
    assert record["target"] == cancelled[:8]


def test_polling_writes_one_record_per_poll(server: SecuredServer) -> None:
    token = server.mint(subject="ana", tenant="bank-a", client_id="poller", scope=SCOPE)
    task_id = _task(server, token)
    mark = server.audit_mark()
    for _ in range(5):
        assert _send(server, token, "tasks/get", {"taskId": task_id}).status_code == 200
    records = _records_of(server, mark, "tasks/get", 5)
    assert len(records) == 5 and {r["reason"] for r in records} == {"ok"}


def test_an_admitted_request_the_protocol_layer_refuses_still_leaves_its_allow(server: SecuredServer) -> None:
    token = server.mint(subject="ana", tenant="bank-a", client_id="headers", scope=SCOPE)
    task_id = _task(server, token)
    mark = server.audit_mark()
    refused = _send(server, token, "tasks/get", {"taskId": task_id}, mcp_method="tasks/cancel")
    assert refused.status_code == 400, refused.text
    [record] = _records_of(server, mark, "tasks/get", 1)
    assert (record["decision"], record["reason"]) == ("allow", "ok")
