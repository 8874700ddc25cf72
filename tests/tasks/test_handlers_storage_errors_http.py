"""Over real HTTP, with the real `aml-mcp` process unable to write any file (a full disk): task
creation and `tasks/*` writes answer a retryable JSON-RPC error with a hint, as HTTP 503 with
`Retry-After` — not `-32603 Internal server error` — nothing is half-written, and once the disk has
room again everything works and the task that was running when the disk filled ends instead of
staying `working`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.protocol.errors import STORAGE_UNAVAILABLE
from tests.support.mcp_http import call_tool, cancel, create, get, wait_for
from tests.support.task_faults import FsizeLimitedServer

FAST = {
    "AML_MCP_TASKS__LEASE_MS": "1000",
    "AML_MCP_TASKS__HEARTBEAT_MS": "200",
    "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "200",
}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FsizeLimitedServer]:
    with FsizeLimitedServer(["conformance-server", "--data-dir", str(tmp_path)], env=FAST) as live:
        yield live


def retryable_storage_error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 503 and response.headers["retry-after"].isdigit(), response.text
    body = response.json()
    assert "result" not in body, body
    error: dict[str, Any] = body["error"]
    assert error["code"] == STORAGE_UNAVAILABLE, error
    assert "retry later" in error["message"]
    assert error["data"]["retryable"] is True and error["data"]["retryAfterMs"] > 0
    return error


@pytest.mark.slow
def test_a_full_disk_gives_retryable_errors_and_strands_nothing(server: FsizeLimitedServer) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as client:
        running = create(client, "slow_compute", {"seconds": 1.0, "label": "through"})["taskId"]
        asking = create(client, "multi_input")["taskId"]
        waiting = wait_for(client, asking, "input_required")
        with server.full_disk():
            retryable_storage_error(call_tool(client, "slow_compute", {"seconds": 0}))
            retryable_storage_error(cancel(client, asking))
            assert get(client, asking) == waiting  # reads go on; the refused cancel changed nothing
        # The disk has room again: the same requests succeed, and nothing was left behind.
        assert wait_for(client, running, "completed", within=10)["result"]["content"][0]["text"] == "through"
        assert create(client, "slow_compute", {"seconds": 0})["status"] == "working"
        assert cancel(client, asking).status_code == 200
        wait_for(client, asking, "cancelled")
    log = server.log()
    assert log.count("task storage unavailable (") == 1, log  # once per outage, not per request
