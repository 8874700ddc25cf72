"""The one MCP client the tests share: 2026-07-28 requests built by hand, so tests control every header
and byte on the wire, posted through any `httpx.Client` (in-process or over a real socket), with an
optional bearer token; and the Tasks extension's calls on top (create, get, update, cancel, wait).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from tests.support.waiting import eventually

PROTOCOL_VERSION = "2026-07-28"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
NAME_FIELD = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

TASKS_ONLY: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
"""Client capabilities declaring the Tasks extension only."""
WITH_TASKS: dict[str, Any] = {**TASKS_ONLY, "elicitation": {}}
"""The Tasks extension and elicitation (a client that can be asked for input)."""
WITHOUT_TASKS: dict[str, Any] = {"elicitation": {}}


def envelope(capabilities: Mapping[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
        "io.modelcontextprotocol/clientCapabilities": dict(capabilities or {}),
        "io.modelcontextprotocol/clientInfo": {"name": "aml-mcp-tests", "version": "0"},
        **extra,
    }


def message(
    method: str, params: Mapping[str, Any] | None = None, *, request_id: Any = 1, **meta: Any
) -> dict[str, Any]:
    body_params = {**(params or {}), "_meta": envelope(**meta)}
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": body_params}


def headers_for(body: Mapping[str, Any], **overrides: str | None) -> dict[str, str]:
    headers = {
        "content-type": "application/json",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": PROTOCOL_VERSION,
        "mcp-method": str(body.get("method")),
    }
    params = body.get("params") or {}
    field = NAME_FIELD.get(str(body.get("method")))
    if field and field in params:
        headers["mcp-name"] = str(params[field])
    elif str(body.get("method", "")).startswith("tasks/") and "taskId" in params:
        headers["mcp-name"] = str(params["taskId"])
    for key, value in overrides.items():
        name = key.replace("_", "-")
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = value
    return headers


def post(
    client: httpx.Client,
    body: Mapping[str, Any],
    *,
    token: str | None = None,
    path: str = "/mcp",
    **header_overrides: str | None,
) -> httpx.Response:
    """POST `body` with the headers it implies (`Authorization: Bearer <token>` when a token is given)."""
    headers = headers_for(body, **header_overrides)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return client.post(path, content=json.dumps(body), headers=headers)


def sse_messages(response: httpx.Response) -> Iterator[dict[str, Any]]:
    """The JSON-RPC messages of a streamed (SSE) response, in order."""
    for line in response.iter_lines():
        if line.startswith("data:"):
            yield json.loads(line[5:].strip())


# -- tools and the Tasks extension ------------------------------------------------------------------


def call_tool(
    client: httpx.Client,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    capabilities: Any = WITH_TASKS,
    token: str | None = None,
    **extra: Any,
) -> httpx.Response:
    params = {"name": name, "arguments": dict(arguments or {}), **extra}
    return post(client, message("tools/call", params, capabilities=capabilities), token=token)


def create(
    client: httpx.Client,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    capabilities: Any = WITH_TASKS,
    token: str | None = None,
) -> dict[str, Any]:
    """Call a tool that runs as a task; the `CreateTaskResult` (asserting it is one)."""
    response = call_tool(client, name, arguments, capabilities=capabilities, token=token)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert result["resultType"] == "task", result
    return result


def task_request(
    client: httpx.Client,
    method: str,
    task_id: Any,
    *,
    capabilities: Any = WITH_TASKS,
    extra: Mapping[str, Any] | None = None,
    token: str | None = None,
    **headers: str | None,
) -> httpx.Response:
    params = {"taskId": task_id, **(extra or {})}
    return post(client, message(method, params, capabilities=capabilities), token=token, **headers)


def get(client: httpx.Client, task_id: str, *, token: str | None = None) -> dict[str, Any]:
    """`tasks/get`: the task's state (asserting HTTP 200)."""
    response = task_request(client, "tasks/get", task_id, token=token)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def update(client: httpx.Client, task_id: str, responses: Any, *, token: str | None = None) -> httpx.Response:
    return task_request(client, "tasks/update", task_id, extra={"inputResponses": responses}, token=token)


def cancel(client: httpx.Client, task_id: str, *, token: str | None = None) -> httpx.Response:
    return task_request(client, "tasks/cancel", task_id, token=token)


def wait_for(
    client: httpx.Client, task_id: str, *statuses: str, within: float = 5.0, token: str | None = None
) -> dict[str, Any]:
    """Poll `tasks/get` until the task's status is one of `statuses`; that state."""
    return eventually(
        lambda: get(client, task_id, token=token),
        until=lambda state: state["status"] in statuses,
        timeout=within,
        interval=0.02,
        what=f"task {task_id[:8]} in {statuses}",
    )


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}
