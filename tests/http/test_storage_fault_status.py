"""The HTTP face of a storage fault: `storage_faults_as_503` sends the SDK's retryable storage error
(-32010, which its status table leaves at 200) as 503 with `Retry-After` from the error's hint, and
touches nothing else; an admission that raises a storage fault refuses the request with that 503,
one that raises anything else with a 500; every JSON-RPC 503 built here carries `Retry-After`."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.types import Message

from aml_mcp.http.endpoint import admission_failed
from aml_mcp.http.responses import jsonrpc_error, storage_faults_as_503
from aml_mcp.tasks.storage import StorageUnavailable

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _start(status: int = 200, content_type: bytes = b"application/json") -> Message:
    return {"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]}


def _body(document: Any, *, more: bool = False) -> Message:
    return {"type": "http.response.body", "body": json.dumps(document).encode(), "more_body": more}


async def _sent(*messages: Message) -> list[Message]:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    answer = storage_faults_as_503(send)
    for message in messages:
        await answer(message)
    return sent


def _error(code: int, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": "m"}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": 3, "error": error}


async def test_the_retryable_storage_error_goes_out_as_503_with_retry_after() -> None:
    body = _body(_error(-32010, {"reason": "storage_unavailable", "retryable": True, "retryAfterMs": 1500}))
    start, sent_body = await _sent(_start(), body)
    assert start["status"] == 503
    headers = dict(start["headers"])
    assert headers[b"retry-after"] == b"2" and headers[b"cache-control"] == b"no-store"
    assert sent_body == body  # the body is the SDK's, unchanged


@pytest.mark.parametrize(
    "messages",
    [
        (_start(), _body(_error(-32603))),  # a bug stays what the SDK says it is
        (_start(), _body({"jsonrpc": "2.0", "id": 3, "result": {"structuredContent": {"code": -32010}}})),
        (_start(400), _body(_error(-32010))),  # only a 200 is changed
        (_start(content_type=b"text/event-stream"), _body(_error(-32010), more=True)),
        (_start(), _body(_error(-32010), more=True), _body({})),  # a streamed body is never held back
        (_start(), _body({**_error(-32010), "pad": "x" * 20_000})),  # a result-sized body is not parsed
    ],
)
async def test_everything_else_is_sent_as_it_came(messages: tuple[Message, ...]) -> None:
    assert await _sent(*messages) == list(messages)


def test_an_admission_that_raises_a_storage_fault_refuses_with_503_and_a_bug_with_500() -> None:
    unavailable = admission_failed(StorageUnavailable("database unreachable"), 9)
    assert unavailable.status_code == 503 and unavailable.headers["retry-after"] == "1"
    error = json.loads(bytes(unavailable.body))
    assert error["id"] == 9 and error["error"]["code"] == -32010
    bug = admission_failed(KeyError("x"), 9)
    assert bug.status_code == 500 and json.loads(bytes(bug.body))["error"]["code"] == -32603


def test_every_jsonrpc_503_carries_retry_after() -> None:
    assert jsonrpc_error(503, -32603, "busy").headers["retry-after"] == "1"
    assert jsonrpc_error(503, -32603, "busy", data={"retryAfterMs": 4200}).headers["retry-after"] == "5"
    assert jsonrpc_error(503, -32603, "busy", headers={"Retry-After": "7"}).headers["retry-after"] == "7"
    assert "retry-after" not in jsonrpc_error(500, -32603, "bug").headers
