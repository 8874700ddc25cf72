"""The tasks surface over HTTP (the verify list of seed G001, except the cross-principal matrix and the
crash tests, which have their own modules).

The server runs in-process; one test that depends on how an HTTP parser hands over a header value
uses the same app behind uvicorn on a real socket. Expiry is reached by moving the Tasks clock.
"""

from __future__ import annotations

import http.client
import json
import random
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.tasks.settings import TaskSettings
from tests.support.asgi import InProcessServer
from tests.support.clocks import OffsetClock
from tests.support.live_server import LiveServer
from tests.support.mcp_http import (
    TASKS_EXTENSION,
    WITH_TASKS,
    WITHOUT_TASKS,
    accept,
    call_tool,
    cancel,
    create,
    get,
    headers_for,
    message,
    post,
    task_request,
    update,
    wait_for,
)
from tests.support.oauth import audit_events, audit_mark
from tests.support.postgres import BACKENDS, backend_settings
from tests.support.waiting import eventually

FLAT_FIELDS = {"resultType", "taskId", "status", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"}
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")


def _settings(data_dir: Path, **overrides: Any) -> Settings:
    return Settings(
        data_dir=data_dir,
        auth=AuthSettings(enabled=False),
        tasks=TaskSettings(poll_interval_ms=250, default_ttl_ms=2_000, max_ttl_ms=2_000),
        **overrides,
    )


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """Every test here runs on SQLite and on PostgreSQL (a schema of its own per server)."""
    with backend_settings(request.param) as overrides:
        yield overrides


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, backend: dict[str, Any]) -> Iterator[InProcessServer]:
    settings = _settings(tmp_path_factory.mktemp("tasks-http"), **backend)
    with InProcessServer(build_app(settings, catalog=fixture_catalog())) as served:
        yield served


@pytest.fixture
def client(server: InProcessServer) -> Iterator[httpx.Client]:
    with server.client(timeout=10) as http:
        yield http


@pytest.fixture
def clock() -> OffsetClock:
    return OffsetClock()


@pytest.fixture
def clocked(tmp_path: Path, clock: OffsetClock, backend: dict[str, Any]) -> Iterator[httpx.Client]:
    """A client of a server of its own whose Tasks extension reads time from `clock`."""
    with backend_settings("postgres" if backend else "sqlite") as own:
        app = build_app(_settings(tmp_path, **own), catalog=fixture_catalog(), clock=clock)
        with InProcessServer(app) as served, served.client(timeout=10) as http:
            yield http


@pytest.fixture(scope="module")
def tcp_server(tmp_path_factory: pytest.TempPathFactory, backend: dict[str, Any]) -> Iterator[LiveServer]:
    """The same app behind uvicorn on 127.0.0.1, for what depends on the HTTP parser."""
    settings = _settings(tmp_path_factory.mktemp("tasks-http-tcp"), **backend)
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


def error_of(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def test_discover_advertises_the_extension(client: httpx.Client) -> None:
    capabilities = post(client, message("server/discover")).json()["result"]["capabilities"]
    assert capabilities["extensions"] == {TASKS_EXTENSION: {}}
    assert "tasks" not in capabilities


def test_create_result_is_flat_and_durable_before_it_is_sent(client: httpx.Client) -> None:
    created = create(client, "slow_compute", {"seconds": 0.3, "label": "flat"})
    assert set(created) - {"statusMessage", "_meta"} == FLAT_FIELDS
    assert created["status"] == "working" and created["ttlMs"] == 2_000 and created["pollIntervalMs"] == 250
    assert re.fullmatch(r"[A-Za-z0-9_-]{32,}", created["taskId"])
    for stamp in ("createdAt", "lastUpdatedAt"):
        assert datetime.fromisoformat(created[stamp].replace("Z", "+00:00")).tzinfo is not None
    # No speculative polling: the id resolves at once.
    state = get(client, created["taskId"])
    assert state["resultType"] == "complete" and state["createdAt"] == created["createdAt"]
    done = wait_for(client, created["taskId"], "completed")
    assert done["result"]["content"] == [{"type": "text", "text": "flat"}]
    assert "_meta" not in done["result"] and "error" not in done and "inputRequests" not in done


def test_task_ids_are_unique_and_unguessable(client: httpx.Client) -> None:
    ids = {create(client, "slow_compute", {"seconds": 0})["taskId"] for _ in range(20)}
    assert len(ids) == 20 and all(len(task_id) >= 32 for task_id in ids)


def test_a_task_tool_without_the_extension_is_refused_before_it_runs(client: httpx.Client) -> None:
    response = call_tool(client, "failing_job", capabilities=WITHOUT_TASKS)
    error = error_of(response, 400, -32021)
    assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}}


def test_an_auto_tool_without_the_extension_runs_synchronously(client: httpx.Client) -> None:
    result = call_tool(
        client, "slow_compute", {"seconds": 0, "label": "sync"}, capabilities=WITHOUT_TASKS
    ).json()["result"]
    assert result["resultType"] == "complete" and result["content"][0]["text"] == "sync"


@pytest.mark.parametrize("legacy", [{"ttl": 1000}, "garbage", None, 7])
def test_a_legacy_task_param_never_opts_in_and_never_fails(client: httpx.Client, legacy: Any) -> None:
    sync = call_tool(client, "greet", {"name": "Ada"}, task=legacy).json()["result"]
    assert sync["resultType"] == "complete"
    auto = call_tool(client, "slow_compute", {"seconds": 0}, capabilities=WITHOUT_TASKS, task=legacy).json()
    assert auto["result"]["resultType"] == "complete"


@pytest.mark.parametrize("method", TASK_METHODS)
def test_tasks_methods_need_the_extension_before_any_lookup(client: httpx.Client, method: str) -> None:
    real = create(client, "slow_compute", {"seconds": 0})["taskId"]
    for task_id in (real, "unknown-task-id"):
        error = error_of(task_request(client, method, task_id, capabilities=WITHOUT_TASKS), 400, -32021)
        assert error["data"]["requiredCapabilities"] == {"extensions": {TASKS_EXTENSION: {}}}


def test_unknown_and_expired_ids_get_the_same_invalid_params(
    clocked: httpx.Client, clock: OffsetClock
) -> None:
    client = clocked
    expired = [create(client, "slow_compute", {"seconds": 0})["taskId"] for _ in TASK_METHODS]
    for task_id in expired:
        wait_for(client, task_id, "completed")
    clock.advance(2_050)  # the server's TTL is 2 s, counted from creation
    for method, old in zip(TASK_METHODS, expired, strict=True):
        extra = {"inputResponses": {}} if method == "tasks/update" else {}
        errors = [
            error_of(task_request(client, method, task_id, extra=extra), 400, -32602)
            for task_id in ("Z" * len(old), old, "x")
        ]
        assert errors[0] == errors[1] == errors[2] == {"code": -32602, "message": "Task not found"}


@pytest.mark.parametrize("bad", [None, 42, "", ["a"], {"id": "x"}])
def test_a_task_id_that_is_not_a_string_is_invalid_params(client: httpx.Client, bad: Any) -> None:
    response = task_request(client, "tasks/get", bad, mcp_name="x")
    error_of(response, 400, -32602)


def test_removed_methods_are_method_not_found(client: httpx.Client) -> None:
    task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
    for method in ("tasks/list", "tasks/result"):
        body = message(method, {"taskId": task_id}, capabilities=WITH_TASKS)
        error_of(post(client, body, mcp_name=task_id), 404, -32601)


@pytest.mark.parametrize("method", TASK_METHODS)
def test_routing_name_must_be_present_and_equal_to_the_task_id(client: httpx.Client, method: str) -> None:
    task_id = create(client, "slow_compute", {"seconds": 5})["taskId"]
    extra = {"inputResponses": {}} if method == "tasks/update" else {}
    error_of(task_request(client, method, task_id, extra=extra, mcp_name=None), 400, -32020)
    error_of(task_request(client, method, task_id, extra=extra, mcp_name=task_id + "x"), 400, -32020)
    error_of(task_request(client, method, task_id, extra=extra, mcp_name="other"), 400, -32020)
    matching = task_request(client, method, task_id, extra=extra)
    assert matching.status_code == 200, matching.text
    assert get(client, task_id)["status"] in {"working", "cancelled"}
    cancel(client, task_id)


def test_method_header_must_match_the_body(client: httpx.Client) -> None:
    task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
    error_of(task_request(client, "tasks/get", task_id, mcp_method="tasks/cancel"), 400, -32020)


def test_partial_duplicate_unknown_and_invalid_updates(client: httpx.Client) -> None:
    task_id = create(client, "multi_input")["taskId"]
    waiting = wait_for(client, task_id, "input_required")
    keys = set(waiting["inputRequests"])
    assert len(keys) == 2
    first, second = sorted(keys)
    assert all(request["method"] == "elicitation/create" for request in waiting["inputRequests"].values())

    ack = update(client, task_id, {first: accept(name="Ann", confirm=True), "never-asked": accept()})
    assert ack.status_code == 200 and ack.json()["result"]["resultType"] == "complete"
    assert set(ack.json()["result"]) <= {"resultType", "_meta"}
    partial = get(client, task_id)
    assert partial["status"] == "input_required" and set(partial["inputRequests"]) == {second}

    duplicate = update(client, task_id, {first: accept(name="Changed", confirm=False)})
    assert duplicate.status_code == 200
    assert get(client, task_id) == partial

    error_of(update(client, task_id, {second: 12345}), 400, -32602)
    error_of(update(client, task_id, None), 400, -32602)
    assert get(client, task_id) == partial

    update(client, task_id, {second: accept(name="Ann", confirm=True)})
    done = wait_for(client, task_id, "completed")
    assert "inputRequests" not in done and "Ann" in done["result"]["content"][0]["text"]


def test_input_required_after_multi_round_trip_then_task(client: httpx.Client) -> None:
    first = call_tool(client, "test_tool_with_task").json()["result"]
    assert first["resultType"] == "input_required" and "user_name" in first["inputRequests"]
    retry = call_tool(
        client,
        "test_tool_with_task",
        inputResponses={"user_name": accept(name="Alice")},
        requestState=first.get("requestState"),
    ).json()["result"]
    assert retry["resultType"] == "task" and "requestState" not in retry and "inputRequests" not in retry
    done = wait_for(client, retry["taskId"], "completed")
    assert "Alice" in done["result"]["content"][0]["text"]


def test_tool_errors_complete_and_protocol_errors_fail(client: httpx.Client) -> None:
    tool_error = create(client, "failing_job")["taskId"]
    protocol_error = create(client, "protocol_error_job")["taskId"]
    completed = wait_for(client, tool_error, "completed", "failed")
    assert completed["status"] == "completed" and completed["result"]["isError"] is True
    failed = wait_for(client, protocol_error, "completed", "failed")
    assert failed["status"] == "failed" and "result" not in failed
    assert failed["error"]["code"] == -32603 and failed["error"]["message"]
    assert failed["statusMessage"]


def test_terminal_tasks_never_change(client: httpx.Client) -> None:
    task_id = create(client, "confirm_delete", {"filename": "a.txt"})["taskId"]
    waiting = wait_for(client, task_id, "input_required")
    (key,) = waiting["inputRequests"]
    update(client, task_id, {key: accept(confirm=True)})
    done = wait_for(client, task_id, "completed")
    for _ in range(2):
        assert cancel(client, task_id).json()["result"]["resultType"] == "complete"
        assert update(client, task_id, {key: accept(confirm=False)}).status_code == 200
    assert get(client, task_id) == done


def test_cancel_stops_a_long_task_promptly(client: httpx.Client) -> None:
    task_id = create(client, "slow_compute", {"seconds": 60})["taskId"]
    acknowledgement = cancel(client, task_id).json()["result"]
    assert acknowledgement["resultType"] == "complete" and set(acknowledgement) <= {"resultType", "_meta"}
    done = wait_for(client, task_id, "cancelled", "completed", "failed", within=1.0)
    assert done["status"] == "cancelled" and "result" not in done and "error" not in done


def test_cancel_racing_completion_ends_in_exactly_one_terminal_state(client: httpx.Client) -> None:
    seen = set()
    for _ in range(10):
        task_id = create(client, "slow_compute", {"seconds": random.uniform(0, 0.03)})["taskId"]
        assert cancel(client, task_id).status_code == 200
        final = wait_for(client, task_id, "completed", "cancelled", "failed")
        assert final["status"] in {"completed", "cancelled"}
        assert ("result" in final) == (final["status"] == "completed")
        seen.add(final["status"])
        assert get(client, task_id) == final
    assert seen


def test_whitespace_around_the_routing_name_is_not_part_of_it(tcp_server: LiveServer) -> None:
    """RFC 9110 §5.5 (the parser in use may hand the value over unstripped; httpx refuses to send it).

    Real socket: what is under test is the value as uvicorn's parser hands it over, raw bytes sent.
    """
    with httpx.Client(base_url=tcp_server.url, timeout=10) as client:
        task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
    body = message("tasks/get", {"taskId": task_id}, capabilities=WITH_TASKS)
    connection = http.client.HTTPConnection("127.0.0.1", tcp_server.port, timeout=10)
    try:
        connection.request(
            "POST", "/mcp", json.dumps(body), {**headers_for(body), "mcp-name": f"  {task_id}\t"}
        )
        response = connection.getresponse()
        assert response.status == 200 and json.loads(response.read())["result"]["taskId"] == task_id
    finally:
        connection.close()


def test_every_decision_is_audited_with_a_short_task_prefix(
    server: InProcessServer, client: httpx.Client
) -> None:
    settings = server.app.state.settings  # type: ignore[attr-defined]
    mark = audit_mark(settings)
    task_id = create(client, "slow_compute", {"seconds": 0, "label": "do-not-log-this-argument"})["taskId"]
    get(client, task_id)
    task_request(client, "tasks/get", task_id, capabilities=WITHOUT_TASKS)
    task_request(client, "tasks/cancel", task_id, mcp_name="elsewhere")
    task_request(client, "tasks/get", "not-a-task")
    expected = {
        ("tools/call", "allow", "task_created"),
        ("tasks/get", "allow", "ok"),
        ("tasks/get", "deny", "missing_extension"),
        ("tasks/cancel", "deny", "routing_mismatch"),
        ("tasks/get", "deny", "not_found"),
    }

    def decisions() -> tuple[list[dict[str, Any]], set[tuple[str, str, str]]]:
        trail = audit_events(settings, since=mark)
        return trail, {(e["method"], e["decision"], e["reason"]) for e in trail}

    trail, seen = eventually(
        decisions, until=lambda found: expected <= found[1], timeout=5, what="every decision audited"
    )
    assert expected <= seen
    flat = json.dumps(trail)
    assert "do-not-log-this-argument" not in flat and task_id not in flat
    created = [e for e in trail if e["method"] == "tools/call" and e["target"] == task_id[:8]]
    assert len(created) == 1 and created[0]["detail"] == {"tool": "slow_compute"}
    assert all(len(e["target"] or "") <= 8 for e in trail if (e["method"] or "").startswith("tasks/"))
