"""Talking to the tasks surface over real HTTP, with every header under the test's control."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests.support.mcp_http import TASKS_EXTENSION, message, post

WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}}
WITHOUT_TASKS: dict[str, Any] = {"elicitation": {}}


def call_tool(
    client: httpx.Client,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    capabilities: Any = WITH_TASKS,
    **extra: Any,
) -> httpx.Response:
    params = {"name": name, "arguments": arguments or {}, **extra}
    return post(client, message("tools/call", params, capabilities=capabilities))


def create(client: httpx.Client, name: str, arguments: dict[str, Any] | None = None) -> dict[str, Any]:
    response = call_tool(client, name, arguments)
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
    extra: dict[str, Any] | None = None,
    **headers: str | None,
) -> httpx.Response:
    params = {"taskId": task_id, **(extra or {})}
    return post(client, message(method, params, capabilities=capabilities), **headers)


def get(client: httpx.Client, task_id: str) -> dict[str, Any]:
    response = task_request(client, "tasks/get", task_id)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    return result


def update(client: httpx.Client, task_id: str, responses: Any) -> httpx.Response:
    return task_request(client, "tasks/update", task_id, extra={"inputResponses": responses})


def cancel(client: httpx.Client, task_id: str) -> httpx.Response:
    return task_request(client, "tasks/cancel", task_id)


def wait_for(client: httpx.Client, task_id: str, *statuses: str, within: float = 5.0) -> dict[str, Any]:
    deadline = time.monotonic() + within
    while True:
        state = get(client, task_id)
        if state["status"] in statuses:
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"task stayed {state['status']}, wanted {statuses}")
        time.sleep(0.02)


def accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}
