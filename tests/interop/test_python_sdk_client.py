"""The official Python SDK client (`mcp` 2.3.0) against a real `aml-mcp serve` in a child process.

The row of the interop table for the Python SDK: OAuth login through the development
authorization server (by dynamic client registration, and as the pre-registered public client
`aml-mcp-cli`), with the browser step played by `approve_async`; then `tools/list`, a synchronous
`search_aml_notes`, `run_full_eval` as a task to completion, and `draft_sar_batch` through
`input_required` → answer (`tasks/update`) → `completed`.

The SDK has no Tasks client, so `_TasksGlue` below is the minimum an application writes: it
declares the extension, claims `resultType: "task"` results, polls `tasks/get` (honouring
`pollIntervalMs`) and answers each new input request once with `tasks/update`. It stays in this
test on purpose; the project's own client package will replace it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.context import ClientRequestContext
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    OAuthClientInformationFull,
    OAuthClientMetadata,
)
from mcp_types import (
    CallToolResult,
    ElicitRequestParams,
    ErrorData,
    Request,
    Result,
)
from pydantic import AnyUrl, TypeAdapter

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from tests.support.sdk_oauth import Browser, MemoryStorage
from tests.support.subprocess_server import ServerProcess

NOTES_PER_BANK = 40
TASKS = "io.modelcontextprotocol/tasks"
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never listened on: the test reads the redirect itself
TERMINAL = {"completed", "failed", "cancelled"}

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


# -- the minimal Tasks glue ----------------------------------------------------------------------


class TaskHandle(Result):
    """`CreateTaskResult`: what `tools/call` answers when the server runs the tool as a task."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class _TaskRequest(Request[dict[str, Any], str]):
    """`tasks/get` / `tasks/update`: the task id goes in the `Mcp-Name` header too."""

    name_param = "taskId"


Answer = Callable[[str, Mapping[str, Any]], Awaitable[dict[str, Any]]]
"""Given an input request's key and the request, the response to send in `tasks/update`."""


class _TasksGlue(ClientExtension):
    identifier = TASKS

    def __init__(self, answer: Answer, *, timeout: float = 60.0) -> None:
        self.answer = answer
        self.timeout = timeout
        self.seen_statuses: list[str] = []
        self.answered: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self._follow)]

    async def _follow(self, handle: TaskHandle, ctx: ClaimContext) -> CallToolResult:
        state: dict[str, Any] = {"status": handle.status, "pollIntervalMs": handle.poll_interval_ms}
        self.seen_statuses.append(handle.status)
        with anyio.fail_after(self.timeout):
            while state["status"] not in TERMINAL:
                await anyio.sleep(min((state.get("pollIntervalMs") or 100) / 1000, 0.5))
                state = await self._send(ctx, "tasks/get", {"taskId": handle.task_id})
                self.seen_statuses.append(state["status"])
                if state["status"] == "input_required":
                    await self._answer(ctx, handle.task_id, state.get("inputRequests") or {})
        if state["status"] != "completed":
            return CallToolResult(content=[], is_error=True, structured_content={"task": state})
        return CallToolResult.model_validate(state["result"])

    async def _answer(self, ctx: ClaimContext, task_id: str, requests: Mapping[str, Any]) -> None:
        new = {key: request for key, request in requests.items() if key not in self.answered}
        if not new:
            return
        responses = {key: await self.answer(key, request) for key, request in new.items()}
        await self._send(ctx, "tasks/update", {"taskId": task_id, "inputResponses": responses})
        self.answered += list(new)

    @staticmethod
    async def _send(ctx: ClaimContext, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request = _TaskRequest(method=method, params=params)
        return await ctx.session.send_request(request, TypeAdapter(dict[str, Any]))


async def _no_direct_elicitation(context: ClientRequestContext, params: ElicitRequestParams) -> ErrorData:
    """Declares the elicitation capability (so a task may ask); questions come through the task."""
    return ErrorData(code=-32600, message="this test answers questions through tasks/update only")


# -- the server and the demo case that needs an analyst's answer -----------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data_dir: Path = tmp_path_factory.mktemp("python-sdk-interop") / "data"
    env = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(NOTES_PER_BANK)}
    with ServerProcess(["serve", "--data-dir", str(data_dir)], env=env) as running:
        yield running


def _case_without_date_of_birth() -> str:
    """A meridian-bank demo case whose subject's date of birth is unknown (drafting asks for it)."""
    meridian = next(tenant for tenant in TENANTS if tenant.name == "meridian-bank")
    for demo in generate_notes(meridian, NOTES_PER_BANK):
        subject = demo.note.subjects[0]
        if subject.date_of_birth is None and subject.account_id:
            return demo.note.case_id
    raise AssertionError("the demo corpus has no case lacking a date of birth")


async def _answer_date_of_birth(key: str, request: Mapping[str, Any]) -> dict[str, Any]:
    assert request["method"] == "elicitation/create", request
    assert key.startswith("dob:"), key
    return {"action": "accept", "content": {"date_of_birth": "1961-04-02"}}


@pytest.mark.parametrize("login", ["dynamic registration", "pre-registered aml-mcp-cli"])
async def test_the_python_sdk_logs_in_lists_calls_and_runs_tasks_to_completion(
    login: str, server: ServerProcess
) -> None:
    resource = f"{server.url}/mcp"
    pre_registered = login.startswith("pre-registered")
    storage = MemoryStorage(
        OAuthClientInformationFull(
            client_id="aml-mcp-cli",
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
        )
        if pre_registered
        else None
    )
    browser = Browser("carol")  # meridian-bank's AML lead: may search, evaluate and draft
    provider = OAuthClientProvider(
        server_url=resource,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            client_name="python sdk interop test",
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    tasks = _TasksGlue(_answer_date_of_birth)
    async with (
        httpx2.AsyncClient(auth=provider, timeout=60) as http,
        Client(
            streamable_http_client(resource, http_client=http),
            mode="2026-07-28",
            extensions=[tasks],
            elicitation_callback=_no_direct_elicitation,
        ) as client,
    ):
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {"search_aml_notes", "run_full_eval", "draft_sar_batch"} <= listed

        found = await client.call_tool("search_aml_notes", {"query": "cash structuring", "top_k": 3})
        assert not found.is_error, found
        assert found.structured_content is not None and found.structured_content["results"]

        evaluated = await client.call_tool("run_full_eval", {})
        assert not evaluated.is_error, evaluated
        assert evaluated.structured_content is not None
        assert evaluated.structured_content["notes"] == NOTES_PER_BANK

        case_id = _case_without_date_of_birth()
        drafted = await client.call_tool("draft_sar_batch", {"case_ids": [case_id]})
        assert not drafted.is_error, drafted
        assert drafted.structured_content is not None
        (entry,) = drafted.structured_content["cases"]
        assert entry["case_id"] == case_id and entry["status"] == "drafted"
        subject = entry["draft"]["subjects"][0]
        assert (subject["date_of_birth"], subject["date_of_birth_source"]) == ("1961-04-02", "analyst")

    assert "input_required" in tasks.seen_statuses and tasks.seen_statuses[-1] == "completed"
    assert len(tasks.answered) == 1 and tasks.answered[0].startswith(f"dob:{case_id}:")
    assert storage.client_info is not None
    if pre_registered:
        assert storage.client_info.client_id == "aml-mcp-cli"
    else:
        assert storage.client_info.client_id != "aml-mcp-cli"
    first = parse_qs(urlsplit(browser.visits[0]).query)
    assert first["client_id"] == [storage.client_info.client_id]
    assert first["resource"] == [resource] and first["code_challenge_method"] == ["S256"]
