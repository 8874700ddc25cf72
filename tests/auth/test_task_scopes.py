"""The gate's hook for the Tasks issue: a `tasks/*` call needs the scope of the tool that made the task."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest

from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec
from tests.support.mcp_http import TASKS_EXTENSION
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}


async def _evaluate(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text="evaluated")])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    tool = ToolSpec(
        name="probe_eval_task",
        description="a task needing aml:eval",
        input_schema={"type": "object", "properties": {}},
        body=_evaluate,
        scope="aml:eval",
        execution=Execution.TASK,
    )
    data_dir: Path = tmp_path_factory.mktemp("task-scopes")
    with secured_server(data_dir, Catalog(tools=ToolRegistry([tool])), issuer=issuer) as running:
        yield running


def test_tasks_get_needs_the_creating_tools_scope(server: SecuredServer) -> None:
    owner = {"subject": "alice", "tenant": "bank-a", "client_id": "copilot"}
    created = server.post(
        "tools/call",
        {"name": "probe_eval_task", "arguments": {}},
        token=server.mint(scope="aml:eval", **owner),
        capabilities=WITH_TASKS,
    )
    assert created.status_code == 200, created.text
    task_id = created.json()["result"]["taskId"]

    mark = server.audit_mark()
    narrowed = server.post(
        "tasks/get",
        {"taskId": task_id},
        token=server.mint(scope="aml:read", **owner),
        capabilities=WITH_TASKS,
    )
    assert narrowed.status_code == 403
    assert 'scope="aml:eval"' in narrowed.headers["www-authenticate"]
    event = server.wait_for_audit(
        since=mark, decision="deny", reason="insufficient_scope", method="tasks/get"
    )
    assert event["subject"] == "alice"
    assert event["target"] == task_id[:8], "the trail keeps a prefix of a task id, never the handle"

    allowed = server.post(
        "tasks/get",
        {"taskId": task_id},
        token=server.mint(scope="aml:eval", **owner),
        capabilities=WITH_TASKS,
    )
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["result"]["taskId"] == task_id
    trail = server.audit_file_lines()
    assert trail and not any(task_id in line for line in trail)
