"""Safe retries: `McpClient` sends an idempotency key with every call and resends a create that got no
answer (a connection closed before or after the server did the work, a 502, a 503) with the same key.

Through a small real proxy (`flaky_proxy.FlakyProxy`) that fails the first attempt, in front of a
real server on a socket: the call returns the task, the proxy saw the create twice with one key, and
the server holds one task. Then the transport's rules on their own: what is resent and what is not,
`Retry-After` honoured and bounded, attempts bounded.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from aml_mcp.app import build_app
from aml_mcp.client import McpClient, TaskHandle
from aml_mcp.client.retries import IDEMPOTENCY_KEY_META, CreateRetries, retry_after_seconds
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.protocol import idempotency
from tests.client.flaky_proxy import Fault, FlakyProxy
from tests.support.live_server import LiveServer
from tests.support.settings import open_settings

SLOW = {"seconds": 0.1, "label": "once"}


@contextlib.contextmanager
def server(data_dir: Path) -> Iterator[LiveServer]:
    with LiveServer(build_app(open_settings(data_dir), catalog=fixture_catalog())) as live:
        yield live


def rows(data_dir: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(data_dir / "aml-mcp.db")) as conn:
        return [row[0] for row in conn.execute("SELECT task_id FROM tasks")]


def keys(proxy: FlakyProxy) -> list[str]:
    return [seen["params"]["_meta"][IDEMPOTENCY_KEY_META] for seen in proxy.seen]


async def create_through(url: str, **client_options: Any) -> TaskHandle:
    async with McpClient(url, listen=False, **client_options) as client:
        outcome = await client.call_tool("slow_compute", SLOW)
    assert isinstance(outcome, TaskHandle), outcome
    return outcome


@pytest.mark.parametrize("fault", list(Fault), ids=[fault.value for fault in Fault])
def test_a_create_whose_first_attempt_fails_is_sent_again_and_makes_one_task(
    tmp_path: Path, fault: Fault
) -> None:
    with server(tmp_path) as live, FlakyProxy(live.port, [fault]) as proxy:
        handle = anyio.run(create_through, f"{proxy.url}/mcp")
        assert len(proxy.seen) == 2, proxy.seen
        first, second = keys(proxy)
        assert first == second and len(first) >= 16
        assert rows(tmp_path) == [handle.task_id]


def test_attempts_are_bounded_and_the_last_answer_is_the_callers(tmp_path: Path) -> None:
    with server(tmp_path) as live, FlakyProxy(live.port, [Fault.UNAVAILABLE] * 10) as proxy:
        with pytest.raises(MCPError) as caught:
            anyio.run(lambda: create_through(f"{proxy.url}/mcp", create_attempts=3))
        assert caught.value.error.message == "Service unavailable, retry later"
        assert len(proxy.seen) == 3
        assert rows(tmp_path) == []


def test_every_call_has_a_key_of_its_own_unless_it_names_one(tmp_path: Path) -> None:
    async def calls(url: str) -> list[str]:
        async with McpClient(url, listen=False) as client:
            made = [await client.call_tool("slow_compute", SLOW) for _ in range(2)]
            made += [await client.call_tool("slow_compute", SLOW, idempotency_key="mine") for _ in range(2)]
        return [handle.task_id for handle in made if isinstance(handle, TaskHandle)]

    with server(tmp_path) as live, FlakyProxy(live.port, []) as proxy:
        ids = anyio.run(calls, f"{proxy.url}/mcp")
        sent = keys(proxy)
        assert sent[0] != sent[1] and sent[2:] == ["mine", "mine"]
        assert len(set(ids)) == 3 and ids[2] == ids[3]
        assert sorted(rows(tmp_path)) == sorted(set(ids))


def test_the_client_and_the_server_name_the_key_alike() -> None:
    assert IDEMPOTENCY_KEY_META == idempotency.IDEMPOTENCY_KEY_META


# -- the transport's rules -------------------------------------------------------------------------


def call_body(key: str | None = "k", method: str = "tools/call") -> bytes:
    meta = {IDEMPOTENCY_KEY_META: key} if key is not None else {}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta}}).encode()


class Script:
    """An inner transport answering from a list: a status (with headers) or an exception to raise."""

    def __init__(self, *steps: Any) -> None:
        self.steps = list(steps)
        self.sent = 0

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.sent += 1
        step = self.steps.pop(0)
        if isinstance(step, Exception):
            raise step
        status, headers = step if isinstance(step, tuple) else (step, {})
        return httpx2.Response(status, headers=headers, json={"jsonrpc": "2.0", "id": 1, "result": {}})


def exchange(script: Script, body: bytes, method: str = "POST", **options: Any) -> tuple[int, list[float]]:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def send() -> int:
        transport = CreateRetries(httpx2.MockTransport(script), sleep=sleep, **options)
        async with httpx2.AsyncClient(transport=transport) as http:
            response = await http.request(method, "http://server.test/mcp", content=body)
            return response.status_code

    return anyio.run(send), slept


def test_retry_after_is_honoured_and_bounded() -> None:
    status, slept = exchange(
        Script((503, {"Retry-After": "2"}), (503, {"Retry-After": "99"}), 200), call_body()
    )
    assert status == 200 and slept == [2.0, 10.0]
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_seconds("soon") is None


def test_connection_errors_and_bad_gateways_are_retried_with_backoff() -> None:
    script = Script(httpx2.ConnectError("refused"), httpx2.RemoteProtocolError("closed"), 502, 200)
    status, slept = exchange(script, call_body(), first_backoff_seconds=0.25)
    assert status == 200 and script.sent == 4
    assert len(slept) == 3 and all(0 <= wait <= 0.25 * 2**n for n, wait in enumerate(slept))


@pytest.mark.parametrize(
    ("body", "method", "answer"),
    [
        (call_body(key=None), "POST", 503),  # no key: a retry could make a second task
        (call_body(method="tasks/get"), "POST", 503),  # only creates are resent
        (call_body(), "GET", 503),
        (call_body(), "POST", 500),  # the server's own answer, not a lost one
        (call_body(), "POST", 429),
        (call_body(), "POST", 400),
    ],
)
def test_nothing_else_is_resent(body: bytes, method: str, answer: int) -> None:
    script = Script(answer, 200)
    status, slept = exchange(script, body, method=method)
    assert (status, script.sent, slept) == (answer, 1, [])


def test_one_attempt_means_no_retry() -> None:
    script = Script(httpx2.ConnectError("refused"))
    with pytest.raises(httpx2.ConnectError):
        exchange(script, call_body(), attempts=1)
    assert script.sent == 1
