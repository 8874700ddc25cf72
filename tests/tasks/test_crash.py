"""Durability and recovery across a crash, with the real `aml-mcp` process killed by SIGKILL.

One scenario, checked by the tests below: tasks are created (a long idempotent one, one that waits
for input and is not idempotent, and a burst of creates answered while the process is killed
mid-stream), the server is SIGKILLed, and a new process on the same data directory takes over.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.mcp_http import create, get, headers_for, message, wait_for
from tests.support.subprocess_server import ServerProcess

pytestmark = pytest.mark.slow  # two real server processes, a SIGKILL and a recovery

FAST_RECOVERY = {
    "AML_MCP_TASKS__LEASE_MS": "1000",
    "AML_MCP_TASKS__HEARTBEAT_MS": "300",
    "AML_MCP_TASKS__CLAIM_INTERVAL_MS": "200",
}
BURST = 40


@dataclass
class Crash:
    acknowledged: list[str]
    """Task ids whose CreateTaskResult reached the client before the SIGKILL."""
    idempotent: str
    not_idempotent: str
    server: ServerProcess


async def _burst_then_kill(port: int, pid: int) -> list[str]:
    """Send BURST creates on separate connections; SIGKILL once a quarter are answered.

    The burst tool is not idempotent, so the restarted server fails those tasks at once instead of
    filling its slots re-running them.
    """
    body = message(
        "tools/call",
        {"name": "confirm_delete", "arguments": {"filename": "burst.txt"}},
        capabilities={"extensions": {"io.modelcontextprotocol/tasks": {}}},
    )
    head = headers_for(body)
    payload = json.dumps(body).encode()
    request = (
        f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: {len(payload)}\r\n"
        + "".join(f"{name}: {value}\r\n" for name, value in head.items())
        + "\r\n"
    ).encode() + payload
    acknowledged: list[str] = []
    killed = asyncio.Event()

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(request)
            await writer.drain()
            response = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in response.split(b"\r\n")
                if line.lower().startswith(b"content-length")
            )
            result = json.loads(await reader.readexactly(length))["result"]
            acknowledged.append(result["taskId"])
            if len(acknowledged) >= BURST // 4 and not killed.is_set():
                killed.set()
                os.kill(pid, signal.SIGKILL)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    await asyncio.gather(*(one() for _ in range(BURST)))
    return acknowledged


@pytest.fixture(scope="module")
def crash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Crash]:
    data_dir = tmp_path_factory.mktemp("crash")
    args = ["conformance-server", "--data-dir", str(data_dir)]
    # The successor imports while the first process works, and starts serving once it is dead.
    second = ServerProcess(args, env=FAST_RECOVERY).spawn()
    try:
        first = ServerProcess(args, env=FAST_RECOVERY).start()
        try:
            with httpx.Client(base_url=first.url, timeout=10) as client:
                idempotent = create(client, "slow_compute", {"seconds": 1.5, "label": "survived"})["taskId"]
                not_idempotent = create(client, "confirm_delete", {"filename": "f.txt"})["taskId"]
                wait_for(client, not_idempotent, "input_required")
            assert first.proc is not None
            acknowledged = asyncio.run(_burst_then_kill(first.port, first.proc.pid))
            first.proc.wait(10)
            assert first.proc.returncode == -signal.SIGKILL
        finally:
            first.kill()
    except BaseException:
        second.kill()
        raise
    second.start()
    try:
        yield Crash(acknowledged, idempotent, not_idempotent, second)
    finally:
        second.terminate()
        second.wait(15)


@pytest.fixture
def client(crash: Crash) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=crash.server.url, timeout=10) as http:
        yield http


def test_every_acknowledged_create_survives_sigkill(crash: Crash, client: httpx.Client) -> None:
    assert len(crash.acknowledged) >= BURST // 4
    for task_id in crash.acknowledged:
        state: dict[str, Any] = get(client, task_id)
        assert state["taskId"] == task_id
        assert state["status"] in {"working", "input_required", "failed"}


def test_an_idempotent_task_is_run_again_after_the_crash(crash: Crash, client: httpx.Client) -> None:
    done = wait_for(client, crash.idempotent, "completed", "failed", within=10)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "survived"


def test_a_task_that_is_not_idempotent_fails_with_a_clear_message(crash: Crash, client: httpx.Client) -> None:
    done = wait_for(client, crash.not_idempotent, "completed", "failed", within=10)
    assert done["status"] == "failed" and "error" in done and "result" not in done
    assert "restart" in done["statusMessage"] and "not safe to run twice" in done["statusMessage"]


def test_the_recovered_server_still_serves_new_tasks(crash: Crash, client: httpx.Client) -> None:
    started = time.monotonic()
    task_id = create(client, "slow_compute", {"seconds": 0, "label": "after"})["taskId"]
    assert wait_for(client, task_id, "completed")["result"]["content"][0]["text"] == "after"
    assert time.monotonic() - started < 5
