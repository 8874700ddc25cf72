"""subscriptions/listen over real HTTP and SSE: ordering, ids, filters, task notifications, closing.

A listen stream stays open until the server ends it, so these tests need a real socket (uvicorn on
127.0.0.1, or the real `aml-mcp` process for SIGTERM): an in-process exchange only returns a
response once it is complete. Requests that are refused with a plain JSON answer use the
in-process `core` server instead. The credential-driven closes (expiry, revocation, lost scope) and
cross-identity delivery need real tokens; they live in `test_listen_auth.py`.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.subscriptions.listen import ListenHandler
from tests.support.live_server import LiveServer
from tests.support.mcp_http import TASKS_EXTENSION, headers_for, message, post
from tests.support.settings import open_settings
from tests.support.sse import SseReader
from tests.support.subprocess_server import ServerProcess
from tests.support.waiting import eventually

SUB_ID = "io.modelcontextprotocol/subscriptionId"
WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}
SIGTERM_TEST = "test_sigterm_ends_open_streams_gracefully_and_the_process_exits"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = open_settings(tmp_path_factory.mktemp("listen"))
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


@pytest.fixture(scope="module", autouse=True)
def sigterm_child(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess | None]:
    """The `aml-mcp` process the SIGTERM test stops, spawned as soon as this module starts (when that
    test is selected): it spends seconds importing, meanwhile the tests before it run."""
    if not any(item.name == SIGTERM_TEST for item in request.session.items):
        yield None
        return
    child = ServerProcess(["conformance-server", "--data-dir", str(tmp_path_factory.mktemp("sigterm"))])
    try:
        yield child.spawn()
    finally:
        child.kill()


@pytest.fixture
def client(server: LiveServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=httpx.Timeout(10, read=30)) as http:
        yield http


def listen_handler(server: LiveServer) -> ListenHandler:
    handler = server.app.state.listen  # type: ignore[attr-defined]
    assert isinstance(handler, ListenHandler)
    return handler


@contextmanager
def listening(
    client: httpx.Client,
    notifications: Any,
    *,
    request_id: Any = "sub",
    extra_headers: dict[str, str] | None = None,
    capabilities: dict[str, Any] | None = None,
) -> Iterator[SseReader]:
    body = message(
        "subscriptions/listen",
        {"notifications": notifications},
        request_id=request_id,
        capabilities=capabilities,
    )
    headers = {**headers_for(body), **(extra_headers or {})}
    with client.stream("POST", "/mcp", content=json.dumps(body), headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert "mcp-session-id" not in response.headers
        yield SseReader(response)


@pytest.mark.parametrize("request_id", ["sub-1", 42, 0, 2**53 - 1, "42"])
def test_ack_is_first_and_every_message_carries_the_id_exactly_as_sent(
    client: httpx.Client, server: LiveServer, request_id: Any
) -> None:
    with listening(
        client, {"toolsListChanged": True, "promptsListChanged": True}, request_id=request_id
    ) as stream:
        ack = stream.next()
        assert ack is not None
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"toolsListChanged": True, "promptsListChanged": True}
        assert ack["params"]["_meta"][SUB_ID] == request_id
        assert type(ack["params"]["_meta"][SUB_ID]) is type(request_id)
        post(
            client,
            message("tools/call", {"name": "test_trigger_tool_change", "arguments": {}}, request_id=900),
        )
        changed = stream.next()
        assert changed is not None and changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"][SUB_ID] == request_id
        listen_handler(server).close_all()
        final = stream.next()
        assert final is not None and final["id"] == request_id
        assert final["result"]["resultType"] == "complete"
        assert final["result"]["_meta"][SUB_ID] == request_id
        assert stream.next() is None


def test_nothing_unrequested_is_delivered(client: httpx.Client, server: LiveServer) -> None:
    with listening(client, {"promptsListChanged": True}) as stream:
        assert stream.next()["method"] == "notifications/subscriptions/acknowledged"  # type: ignore[index]
        post(
            client,
            message("tools/call", {"name": "test_trigger_tool_change", "arguments": {}}, request_id=901),
        )
        post(
            client,
            message("tools/call", {"name": "test_trigger_prompt_change", "arguments": {}}, request_id=902),
        )
        delivered = stream.next()
        assert delivered is not None and delivered["method"] == "notifications/prompts/list_changed"
        listen_handler(server).close_all()
        assert [m.get("method") for m in stream.rest()] == [None]  # only the final result


@pytest.mark.parametrize(
    "notifications",
    [
        None,
        "all",
        ["toolsListChanged"],
        {"toolsListChanged": True, "everything": True},
        {"toolsListChanged": 1},
        {"resourceSubscriptions": "test://static-text"},
        {"resourceSubscriptions": [""]},
        {"taskIds": "abc"},
        {"taskIds": [1, 2]},
        {"taskIds": [""]},
    ],
)
def test_forged_and_malformed_filters_are_invalid_params(core: httpx.Client, notifications: Any) -> None:
    body = message(
        "subscriptions/listen", {"notifications": notifications}, request_id=5, capabilities=WITH_TASKS
    )
    response = post(core, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32602 and response.json()["id"] == 5


def test_task_filter_without_the_tasks_extension_is_32021(core: httpx.Client) -> None:
    body = message("subscriptions/listen", {"notifications": {"taskIds": ["x"]}}, request_id=6)
    response = post(core, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32021
    assert error["data"]["requiredCapabilities"] == {"extensions": {TASKS_EXTENSION: {}}}


def test_resource_filter_keeps_only_uris_this_server_has(client: httpx.Client, server: LiveServer) -> None:
    wanted = ["test://static-text", "test://template/7/data", "test://nope", "file:///etc/passwd"]
    with listening(client, {"resourceSubscriptions": wanted}) as stream:
        ack = stream.next()
        assert ack is not None
        assert ack["params"]["notifications"] == {"resourceSubscriptions": wanted[:2]}
        listen_handler(server).close_all()


def test_listen_acknowledges_first_and_delivers_only_what_was_asked(
    client: httpx.Client, server: LiveServer
) -> None:
    listen = message(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, request_id="sub-1"
    )
    with (
        httpx.Client(base_url=server.url, timeout=10) as other,
        client.stream("POST", "/mcp", content=json.dumps(listen), headers=headers_for(listen)) as stream,
    ):
        lines = stream.iter_lines()
        frames: list[dict[str, object]] = []
        for line in lines:
            if line.startswith("data:"):
                frames.append(json.loads(line[5:]))
                break
        trigger = message("tools/call", {"name": "test_trigger_tool_change", "arguments": {}}, request_id=2)
        assert post(other, trigger).status_code == 200
        for line in lines:
            if line.startswith("data:"):
                frames.append(json.loads(line[5:]))
                break
    ack, changed = frames
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"] == {  # type: ignore[comparison-overlap]
        "notifications": {"toolsListChanged": True},
        "_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"},
    }
    assert changed["method"] == "notifications/tools/list_changed"
    assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"  # type: ignore[index]


@pytest.mark.parametrize(
    "notifications",
    [
        ["toolsListChanged"],
        {"toolsListChanged": True, "madeUp": True},
        {"toolsListChanged": "yes"},
        {"resourceSubscriptions": "x"},
    ],
)
def test_listen_refuses_malformed_filters(core: httpx.Client, notifications: object) -> None:
    listen = message("subscriptions/listen", {"notifications": notifications}, request_id=4)
    response = post(core, listen)
    assert response.json()["error"]["code"] == -32602


def create_task(client: httpx.Client, seconds: float) -> str:
    body = message(
        "tools/call", {"name": "slow_compute", "arguments": {"seconds": seconds}}, capabilities=WITH_TASKS
    )
    result = post(client, body).json()["result"]
    assert result["resultType"] == "task"
    return str(result["taskId"])


def test_task_notifications_carry_the_complete_state_and_unknown_ids_are_dropped(
    client: httpx.Client, server: LiveServer
) -> None:
    task_id = create_task(client, 0.6)
    unknown = "0" * 32
    with listening(client, {"taskIds": [unknown, task_id]}, capabilities=WITH_TASKS) as stream:
        ack = stream.next()
        assert ack is not None
        assert ack["params"]["notifications"] == {"taskIds": [task_id]}
        seen: list[dict[str, Any]] = []
        while True:
            note = stream.next(timeout=10)
            assert note is not None and note["method"] == "notifications/tasks"
            assert note["params"]["_meta"][SUB_ID] == "sub"
            seen.append(note["params"])
            if note["params"]["status"] in ("completed", "failed", "cancelled"):
                break
        final_state = seen[-1]
        assert final_state["taskId"] == task_id and final_state["status"] == "completed"
        assert "resultType" not in final_state
        polled = post(client, message("tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS)).json()[
            "result"
        ]
        assert {k: v for k, v in final_state.items() if k != "_meta"} == {
            k: v for k, v in polled.items() if k not in ("resultType", "_meta")
        }
        listen_handler(server).close_all()


def test_abrupt_client_close_frees_the_stream(tmp_path: Any) -> None:
    with LiveServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        _open_then_drop(server)


def _open_then_drop(server: LiveServer) -> None:
    handler = listen_handler(server)
    before = handler.open_streams
    body = json.dumps(message("subscriptions/listen", {"notifications": {"toolsListChanged": True}})).encode()
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers_for(json.loads(body)).items())
    with socket.create_connection(("127.0.0.1", server.port)) as raw:
        raw.sendall(head.encode() + b"\r\n" + body)
        assert b"notifications/subscriptions/acknowledged" in _read_until(raw, b"acknowledged")
        assert handler.open_streams == before + 1
    eventually(lambda: handler.open_streams == before, interval=0.02, what="the dropped stream to be freed")


def _read_until(raw: socket.socket, marker: bytes) -> bytes:
    received = b""
    raw.settimeout(5)
    while marker not in received:
        chunk = raw.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


@pytest.mark.parametrize(
    "resume_headers",
    [
        {"mcp-session-id": "0123456789abcdef"},
        {"last-event-id": "1"},
        {"mcp-session-id": "x", "last-event-id": "99"},
    ],
)
def test_resume_attempts_are_ignored_and_start_a_fresh_stream(
    client: httpx.Client, server: LiveServer, resume_headers: dict[str, str]
) -> None:
    with listening(client, {"toolsListChanged": True}, request_id="first") as first:
        assert first.next() is not None
        post(
            client,
            message("tools/call", {"name": "test_trigger_tool_change", "arguments": {}}, request_id=903),
        )
        assert first.next()["method"] == "notifications/tools/list_changed"  # type: ignore[index]
    with listening(
        client, {"toolsListChanged": True}, request_id="again", extra_headers=resume_headers
    ) as again:
        ack = again.next()
        assert ack is not None and ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"][SUB_ID] == "again"
        listen_handler(server).close_all()
        assert [m.get("method") for m in again.rest()] == [None]  # no replay of the earlier change


@pytest.mark.slow
def test_sigterm_ends_open_streams_gracefully_and_the_process_exits(
    sigterm_child: ServerProcess | None,
) -> None:
    assert sigterm_child is not None
    with sigterm_child as proc:
        with (
            httpx.Client(base_url=proc.url, timeout=httpx.Timeout(10, read=30)) as http,
            listening(http, {"toolsListChanged": True}, request_id=77) as stream,
        ):
            assert stream.next() is not None
            started = time.monotonic()
            proc.terminate()
            final = stream.next(timeout=10)
            assert final is not None and final["id"] == 77
            assert final["result"]["resultType"] == "complete"
            assert final["result"]["_meta"][SUB_ID] == 77
            assert stream.next(timeout=10) is None
        # uvicorn re-raises SIGTERM once it has shut down gracefully, so the status says "terminated".
        assert proc.wait(15) in (0, -15)
        assert time.monotonic() - started < 10
