"""`McpClient` against the AML server over real HTTP with real signed tokens: a synchronous tool's
result, a task's result by listening and by polling, answers by `on_input` and by `answer()`,
status iteration, cancellation, handles on existing tasks."""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from aml_mcp.client import McpClient, TaskCancelled, TaskHandle, TaskState
from tests.aml.tools.aml_client import A
from tests.support.aml_live import (
    ALL_SCOPES,
    MethodLog,
    case_needing_dob,
    complete_case,
    http_client,
    mcp_url,
)
from tests.support.oauth import SecuredServer

Cases = dict[str, dict[str, Any]]


def _token(server: SecuredServer, scope: str = ALL_SCOPES) -> str:
    return server.mint(tenant=A, scope=scope, subject="carol", client_id="copilot")


async def _task(client: McpClient, tool: str, arguments: dict[str, Any]) -> TaskHandle:
    outcome = await client.call_tool(tool, arguments)
    assert isinstance(outcome, TaskHandle), outcome
    return outcome


def test_a_synchronous_tool_returns_its_result(aml_server: SecuredServer) -> None:
    log = MethodLog()

    async def main() -> types.CallToolResult:
        async with (
            http_client(_token(aml_server), log) as http,
            McpClient(mcp_url(aml_server), http_client=http) as c,
        ):
            outcome = await c.call_tool("search_aml_notes", {"query": "cash deposits", "top_k": 2})
            assert isinstance(outcome, types.CallToolResult)
            return outcome

    result = anyio.run(main)
    assert result.is_error is not True
    assert result.structured_content is not None and len(result.structured_content["results"]) == 2
    assert log.count("tools/call") == 1


def test_a_task_result_arrives_by_listening(aml_server: SecuredServer) -> None:
    log = MethodLog()

    async def main() -> tuple[list[TaskState], types.CallToolResult]:
        async with (
            http_client(_token(aml_server), log) as http,
            McpClient(mcp_url(aml_server), http_client=http) as c,
        ):
            handle = await _task(c, "run_full_eval", {})
            seen = [state async for state in handle.statuses()]
            return seen, await handle.result()

    seen, result = anyio.run(main)
    assert seen[-1].status == "completed" and all(not s.terminal for s in seen[:-1])
    assert result.structured_content is not None and result.structured_content["cases"] > 0
    assert log.count("subscriptions/listen") == 1
    # One tasks/get after the stream is acknowledged; every other state came on the stream.
    assert log.count("tasks/get") == 1
    assert seen[0].status == "working"


def test_a_task_result_arrives_by_polling_when_listening_is_off(aml_server: SecuredServer) -> None:
    log = MethodLog()

    async def main() -> types.CallToolResult:
        async with (
            http_client(_token(aml_server), log) as http,
            McpClient(mcp_url(aml_server), http_client=http, listen=False) as c,
        ):
            return await (await _task(c, "run_full_eval", {})).result()

    result = anyio.run(main)
    assert result.structured_content is not None
    assert log.count("subscriptions/listen") == 0
    assert log.count("tasks/get") >= 2


@pytest.mark.parametrize("listen", [True, False])
def test_on_input_answers_the_task_and_it_completes(
    aml_server: SecuredServer, demo_cases: Cases, listen: bool
) -> None:
    case = case_needing_dob(demo_cases[A])
    asked: list[tuple[str, dict[str, Any]]] = []

    async def on_input(key: str, request: Any) -> dict[str, Any]:
        asked.append((key, dict(request)))
        return {"action": "accept", "content": {"date_of_birth": "1970-01-02"}}

    async def main() -> types.CallToolResult:
        async with (
            http_client(_token(aml_server), MethodLog()) as http,
            McpClient(mcp_url(aml_server), http_client=http, on_input=on_input, listen=listen) as c,
        ):
            return await (await _task(c, "draft_sar_batch", {"case_ids": [case]})).result()

    result = anyio.run(main)
    assert [key for key, _ in asked] == [key for key, _ in asked[:1]] and len(
        asked
    ) == 1  # asked once, not per poll
    key, request = asked[0]
    assert key.startswith(f"dob:{case}:") and request["method"] == "elicitation/create"
    drafted = result.structured_content["cases"][0]  # type: ignore[index]
    assert drafted["case_id"] == case and "1970-01-02" in str(drafted)


def test_answer_and_statuses_without_a_handler(aml_server: SecuredServer, demo_cases: Cases) -> None:
    case = case_needing_dob(demo_cases[A])

    async def main() -> list[str]:
        statuses: list[str] = []
        async with (
            http_client(_token(aml_server), MethodLog()) as http,
            McpClient(mcp_url(aml_server), http_client=http) as c,
        ):
            handle = await _task(c, "draft_sar_batch", {"case_ids": [case]})
            async for state in handle.statuses():
                statuses.append(state.status)
                # After the answer, the task may still read input_required for a while (the update
                # is eventually consistent): an answered key is not pending any more.
                if state.status == "input_required" and handle.pending_inputs():
                    (key,) = handle.pending_inputs()
                    await handle.answer(
                        {key: {"action": "accept", "content": {"date_of_birth": "1969-07-20"}}}
                    )
                    assert handle.pending_inputs() == {}
            assert (await handle.result()).is_error is not True
        return statuses

    statuses = anyio.run(main)
    assert "input_required" in statuses and statuses[-1] == "completed"


def test_cancel_ends_the_task_cancelled(aml_server: SecuredServer, demo_cases: Cases) -> None:
    case = case_needing_dob(demo_cases[A])

    async def main() -> TaskCancelled:
        async with (
            http_client(_token(aml_server), MethodLog()) as http,
            McpClient(mcp_url(aml_server), http_client=http) as c,
        ):
            handle = await _task(c, "draft_sar_batch", {"case_ids": [case]})
            async for state in handle.statuses():
                if state.status == "input_required":
                    await handle.cancel()
            with pytest.raises(TaskCancelled) as ended:
                await handle.result()
            return ended.value

    cancelled = anyio.run(main)
    assert cancelled.state.status == "cancelled"


def test_a_handle_on_an_existing_task(aml_server: SecuredServer, demo_cases: Cases) -> None:
    case = complete_case(demo_cases[A])

    async def main() -> tuple[str, types.CallToolResult]:
        url = mcp_url(aml_server)
        async with http_client(_token(aml_server), MethodLog()) as http:
            async with McpClient(url, http_client=http) as first:
                task_id = (await _task(first, "draft_sar_batch", {"case_ids": [case]})).task_id
            async with McpClient(url, http_client=http) as second:
                handle = await second.task(task_id)
                return task_id, await handle.result()

    task_id, result = anyio.run(main)
    assert task_id and result.structured_content["cases"][0]["case_id"] == case  # type: ignore[index]


def test_a_tool_the_scope_does_not_cover_is_refused(aml_server: SecuredServer) -> None:
    async def main() -> None:
        async with (
            http_client(_token(aml_server, "aml:read"), MethodLog()) as http,
            McpClient(mcp_url(aml_server), http_client=http) as c,
        ):
            await c.call_tool("run_full_eval", {})

    with pytest.raises(MCPError) as refused:
        anyio.run(main)
    assert refused.value.error.data == {
        "error": "insufficient_scope",
        "error_description": "this request needs scope aml:eval",
        "scope": "aml:eval",
    }
