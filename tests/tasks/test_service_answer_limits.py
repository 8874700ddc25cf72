"""The answers kept with one task are capped (`max_input_responses_bytes`): over the cap, the
create or the `tasks/update` is refused with -32602 and nothing of it is stored."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.tasks.settings import TaskSettings
from tests.support.live_server import LiveServer
from tests.support.mcp_http import accept, call_tool, create, get, update, wait_for

LIMIT = 4096


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("answer-limits"),
        auth=AuthSettings(enabled=False),
        tasks=TaskSettings(poll_interval_ms=100, max_input_responses_bytes=LIMIT),
    )
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        yield http


def task_rows(server: LiveServer) -> int:
    path: Path = server.app.state.settings.data_dir / "aml-mcp.db"  # type: ignore[attr-defined]
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
    finally:
        conn.close()


def test_an_oversized_answer_gathered_before_the_task_refuses_the_create(
    server: LiveServer, client: httpx.Client
) -> None:
    first = call_tool(client, "test_tool_with_task").json()["result"]
    before = task_rows(server)
    response = call_tool(
        client,
        "test_tool_with_task",
        inputResponses={"user_name": accept(name="A" * (LIMIT + 1))},
        requestState=first.get("requestState"),
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32602 and f"at most {LIMIT} bytes" in error["message"]
    assert task_rows(server) == before


def test_an_oversized_update_is_refused_whole_and_changes_nothing(client: httpx.Client) -> None:
    task_id = create(client, "multi_input")["taskId"]
    waiting = wait_for(client, task_id, "input_required")
    assert set(waiting["inputRequests"]) == {"name", "confirm"}
    response = update(
        client, task_id, {"name": accept(name="B" * (LIMIT + 1)), "confirm": accept(confirm=True)}
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32602 and "inputResponses too large" in error["message"]
    assert get(client, task_id) == waiting
    assert (
        update(client, task_id, {"name": accept(name="Ann"), "confirm": accept(confirm=True)}).status_code
        == 200
    )
    assert "Ann" in wait_for(client, task_id, "completed")["result"]["content"][0]["text"]
