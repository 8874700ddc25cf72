"""Listen streams under real tokens: closed at expiry and on revocation, never crossing identities.

Every stream is re-authorized before each event and whenever access changes; what closes it is
reported in the graceful result's `_meta["aml-mcp/closeReason"]`. The server runs on a real socket
(uvicorn on 127.0.0.1): a stream stays open while the test acts on it, which an in-process exchange
(complete responses only) cannot show. The few plain refusals here share that server.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import mcp_types as types
import pytest

from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec
from aml_mcp.cli import main as cli_main
from tests.support.mcp_http import TASKS_EXTENSION, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.sse import SseReader

SUB_ID = "io.modelcontextprotocol/subscriptionId"
CLOSE_REASON = "aml-mcp/closeReason"
WITH_TASKS = {"extensions": {TASKS_EXTENSION: {}}}


async def _sleep_then_answer(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    await anyio.sleep(float(arguments.get("seconds", 0.5)))
    return types.CallToolResult(content=[types.TextContent(text=f"done for {ctx.principal.subject}")])


def _catalog() -> Catalog:
    return Catalog(
        tools=ToolRegistry(
            [
                ToolSpec(
                    name="eval_job",
                    description="a slow job needing aml:eval",
                    input_schema={"type": "object", "properties": {"seconds": {"type": "number"}}},
                    body=_sleep_then_answer,
                    scope="aml:eval",
                    execution=Execution.TASK,
                )
            ]
        )
    )


@pytest.fixture(scope="module")
def server(issuer: TestIssuer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("listen-auth"), _catalog(), issuer=issuer, real_socket=True
    ) as running:
        yield running


@contextmanager
def listening(
    server: SecuredServer, token: str, notifications: Any, request_id: Any = "s"
) -> Iterator[SseReader]:
    body = message(
        "subscriptions/listen",
        {"notifications": notifications},
        request_id=request_id,
        capabilities=WITH_TASKS,
    )
    headers = {**headers_for(body), "authorization": f"Bearer {token}"}
    with (
        httpx.Client(base_url=server.url, timeout=httpx.Timeout(10, read=30)) as http,
        http.stream("POST", "/mcp", content=json.dumps(body), headers=headers) as response,
    ):
        assert response.status_code == 200, response.read()
        yield SseReader(response)


def create_task(server: SecuredServer, token: str, seconds: float) -> str:
    response = server.post(
        "tools/call",
        {"name": "eval_job", "arguments": {"seconds": seconds}},
        token=token,
        capabilities=WITH_TASKS,
    )
    assert response.status_code == 200, response.text
    return str(response.json()["result"]["taskId"])


def jti_of(token: str) -> str:
    return str(json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))["jti"])


def final_result(stream: SseReader, timeout: float = 10.0) -> dict[str, Any]:
    """Skip notifications until the stream's final `subscriptions/listen` result."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message_ = stream.next(timeout=max(0.1, deadline - time.monotonic()))
        assert message_ is not None, "the stream ended without its final result"
        if "result" in message_:
            assert stream.next() is None
            return message_
    raise AssertionError("no final result in time")


def test_listen_needs_a_token(server: SecuredServer) -> None:
    response = server.post("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer ")


@pytest.mark.slow
def test_stream_closes_when_the_token_expires_even_with_no_events(server: SecuredServer) -> None:
    token = server.mint(subject="exp", scope="aml:eval", ttl=2)
    started = time.monotonic()
    with listening(server, token, {"toolsListChanged": True}, request_id=31) as stream:
        assert stream.next()["method"] == "notifications/subscriptions/acknowledged"  # type: ignore[index]
        final = final_result(stream, timeout=8)
    assert final["id"] == 31
    assert final["result"]["_meta"][SUB_ID] == 31
    assert final["result"]["_meta"][CLOSE_REASON] == "token_expired"
    assert 0.5 < time.monotonic() - started < 6


def test_revoking_the_token_closes_its_open_stream_and_no_other(server: SecuredServer) -> None:
    doomed = server.mint(subject="rev", scope="aml:eval")
    spared = server.mint(subject="rev", scope="aml:eval")
    with (
        listening(server, doomed, {"toolsListChanged": True}, request_id="doomed") as first,
        listening(server, spared, {"toolsListChanged": True}, request_id="spared") as second,
    ):
        assert first.next() is not None and second.next() is not None
        # `--jti=...`: a random token id may start with "-", which argparse would take for an option.
        assert cli_main(["revoke", "--data-dir", str(server.data_dir), f"--jti={jti_of(doomed)}"]) == 0
        final = final_result(first, timeout=8)
        assert final["result"]["_meta"][CLOSE_REASON] == "revoked_token"
        with pytest.raises(TimeoutError):
            second.next(timeout=1.0)


def test_revoking_a_subject_closes_every_stream_of_that_subject(
    server: SecuredServer, issuer: TestIssuer
) -> None:
    token = server.mint(subject="mallory", scope="aml:eval")
    with listening(server, token, {"toolsListChanged": True}) as stream:
        assert stream.next() is not None
        revoke = [
            "revoke",
            "--data-dir",
            str(server.data_dir),
            "--subject",
            "mallory",
            "--issuer",
            issuer.issuer,
        ]
        assert cli_main(revoke) == 0
        try:
            assert final_result(stream, timeout=8)["result"]["_meta"][CLOSE_REASON] == "revoked_subject"
        finally:
            assert cli_main([*revoke, "--lift"]) == 0


OWNERS = {
    "owner": {"subject": "alice", "tenant": "bank-a", "client_id": "copilot"},
    "other subject": {"subject": "bob", "tenant": "bank-a", "client_id": "copilot"},
    "other tenant": {"subject": "alice", "tenant": "bank-b", "client_id": "copilot"},
    "other client": {"subject": "alice", "tenant": "bank-a", "client_id": "other-app"},
}


@pytest.mark.slow
def test_no_cross_identity_delivery_even_for_the_same_task_id(server: SecuredServer) -> None:
    tokens = {name: server.mint(scope="aml:eval", **fields) for name, fields in OWNERS.items()}
    task_id = create_task(server, tokens["owner"], seconds=1.0)
    streams: dict[str, SseReader] = {}
    with (
        listening(server, tokens["owner"], {"taskIds": [task_id]}, "owner") as owner,
        listening(server, tokens["other subject"], {"taskIds": [task_id]}, "x1") as other_subject,
        listening(server, tokens["other tenant"], {"taskIds": [task_id]}, "x2") as other_tenant,
        listening(server, tokens["other client"], {"taskIds": [task_id]}, "x3") as other_client,
    ):
        streams = {"owner": owner, "x1": other_subject, "x2": other_tenant, "x3": other_client}
        acks = {name: stream.next() for name, stream in streams.items()}
        assert acks["owner"]["params"]["notifications"] == {"taskIds": [task_id]}  # type: ignore[index]
        for name in ("x1", "x2", "x3"):
            assert acks[name]["params"]["notifications"] == {"taskIds": []}, name  # type: ignore[index]
        statuses = []
        while not statuses or statuses[-1] != "completed":
            note = owner.next(timeout=10)
            assert note is not None and note["params"]["taskId"] == task_id
            statuses.append(note["params"]["status"])
        assert note["params"]["result"]["content"][0]["text"] == "done for alice"
        for name in ("x1", "x2", "x3"):
            with pytest.raises(TimeoutError):
                streams[name].next(timeout=0.3)


def test_a_task_filter_needs_the_scope_of_the_tool_that_made_the_task(server: SecuredServer) -> None:
    creator = server.mint(subject="carol", scope="aml:eval")
    task_id = create_task(server, creator, seconds=0.2)
    reader_only = server.mint(subject="carol", scope="aml:read")
    response = server.post(
        "subscriptions/listen",
        {"notifications": {"taskIds": [task_id]}},
        token=reader_only,
        capabilities=WITH_TASKS,
    )
    assert response.status_code == 403
    assert 'scope="aml:eval"' in response.headers["www-authenticate"]


def test_unauthenticated_core_filters_are_not_a_way_around_the_gate(
    server: SecuredServer, tmp_path: Path
) -> None:
    expired = server.mint(subject="late", scope="aml:eval", ttl=-120)
    response = server.post(
        "subscriptions/listen", {"notifications": {"toolsListChanged": True}}, token=expired
    )
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
