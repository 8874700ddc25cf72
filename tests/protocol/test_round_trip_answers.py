"""Only answers to input requests the server made are handed to a task (and stored with it).

The finding: `tools/call` with 1000 made-up `inputResponses` keys of 900 bytes each stored
949,891 bytes with the task, kept for its whole TTL; 50 such calls stored 48 MB.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.tasks.settings import TaskSettings
from tests.support.live_server import LiveServer
from tests.support.mcp_http import accept, call_tool, wait_for

JUNK = {f"made-up-{i}": {"action": "accept", "content": {"x": "A" * 900}} for i in range(1000)}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("round-trip-answers"),
        auth=AuthSettings(enabled=False),
        tasks=TaskSettings(poll_interval_ms=100),
    )
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def stored_answers(server: LiveServer, task_id: str) -> tuple[dict[str, Any], int]:
    """The task's stored `input_responses` and their size in bytes, read from the database file."""
    path: Path = server.app.state.settings.data_dir / "aml-mcp.db"  # type: ignore[attr-defined]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (text,) = conn.execute("SELECT input_responses FROM tasks WHERE task_id = ?", (task_id,)).fetchone()
    finally:
        conn.close()
    return json.loads(text), len(text.encode())


def test_unsolicited_answers_on_a_task_create_are_not_stored(
    server: LiveServer, client: httpx.Client
) -> None:
    response = call_tool(client, "slow_compute", {"seconds": 0}, inputResponses=JUNK)
    assert response.status_code == 200, response.text
    task = response.json()["result"]
    assert task["resultType"] == "task"
    assert stored_answers(server, task["taskId"]) == ({}, 2)
    wait_for(client, task["taskId"], "completed")


def test_the_answer_the_preflight_asked_for_reaches_the_task_and_nothing_else(
    server: LiveServer, client: httpx.Client
) -> None:
    first = call_tool(client, "test_tool_with_task").json()["result"]
    assert first["resultType"] == "input_required" and set(first["inputRequests"]) == {"user_name"}
    answer = accept(name="Alice")
    retry = call_tool(
        client,
        "test_tool_with_task",
        inputResponses={"user_name": answer, **dict(list(JUNK.items())[:50])},
        requestState=first.get("requestState"),
    ).json()["result"]
    assert retry["resultType"] == "task"
    assert stored_answers(server, retry["taskId"])[0] == {"user_name": answer}
    done = wait_for(client, retry["taskId"], "completed")
    assert "Alice" in done["result"]["content"][0]["text"]
