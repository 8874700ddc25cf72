"""`McpClient` against a hostile server (finding N7 of the second security review): a real aml-mcp
server behind a real proxy that answers `tasks/get` with a body larger than the client reads, with a
compressed body, or about another task. The library raises each as an `AnswerRefused` of its own
kind, uses nothing of the answer, and leaves a caller's own HTTP client as it found it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import httpx2
import pytest

from aml_mcp.client import (
    DEFAULT_MAX_ANSWER_BYTES,
    AnswerTooLarge,
    BearerAuth,
    CompressedAnswer,
    McpClient,
    TaskHandle,
    WrongTask,
)
from tests.aml.tools.aml_client import A
from tests.client.hostile_server import MIB, OTHER_CANARY, HostileProxy, hostile_proxy
from tests.support.aml_live import ALL_SCOPES, complete_case
from tests.support.oauth import SecuredServer

Cases = dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def proxied(aml_server: SecuredServer) -> Iterator[tuple[HostileProxy, str]]:
    with hostile_proxy(aml_server.url) as (proxy, url):
        yield proxy, f"{url}/mcp"


@pytest.fixture
def proxy(proxied: tuple[HostileProxy, str]) -> Iterator[HostileProxy]:
    yield proxied[0]
    proxied[0].mode = "pass"


def _http(server: SecuredServer) -> httpx2.AsyncClient:
    token = server.mint(tenant=A, scope=ALL_SCOPES, subject="carol", client_id="copilot")
    return httpx2.AsyncClient(auth=BearerAuth(token), timeout=httpx2.Timeout(30, read=300))


def _outcome_of_get(
    server: SecuredServer, url: str, proxy: HostileProxy, cases: Cases, mode: str, **client: Any
) -> tuple[BaseException | None, dict[str, int]]:
    """Start a task, switch the proxy to `mode`, `tasks/get` it: what that raised, and how many
    hooks the caller's own HTTP client carries afterwards."""

    async def main() -> tuple[BaseException | None, dict[str, int]]:
        async with _http(server) as http:
            async with McpClient(url, http_client=http, **client) as connection:
                handle = await connection.call_tool(
                    "draft_sar_batch", {"case_ids": [complete_case(cases[A])]}
                )
                assert isinstance(handle, TaskHandle)
                proxy.mode = mode
                try:
                    await connection.get_task(handle.task_id)
                except Exception as error:
                    raised: BaseException | None = error
                else:
                    raised = None
            return raised, {kind: len(hooks) for kind, hooks in http.event_hooks.items()}

    return anyio.run(main)


def test_an_answer_past_the_limit_raises_answer_too_large(
    aml_server: SecuredServer, proxied: tuple[HostileProxy, str], proxy: HostileProxy, demo_cases: Cases
) -> None:
    # Far more than loopback's socket buffers can hold (a few MiB each way), so a server able to
    # send it all would mean the client read it all (8 MiB once fitted in the buffers: CI saw it).
    proxy.big_bytes = 48 * MIB
    raised, hooks = _outcome_of_get(
        aml_server, proxied[1], proxy, demo_cases, "bigjson", max_answer_bytes=MIB
    )
    assert isinstance(raised, AnswerTooLarge) and raised.max_bytes == MIB, raised
    assert not proxy.big_finished and proxy.big_sent <= 24 * MIB, proxy.big_sent
    assert hooks == {"request": 0, "response": 0}  # the caller's client is as it was


def test_the_default_limit_reads_an_answer_below_it(
    aml_server: SecuredServer, proxied: tuple[HostileProxy, str], proxy: HostileProxy, demo_cases: Cases
) -> None:
    proxy.big_bytes = DEFAULT_MAX_ANSWER_BYTES // 2
    raised, _ = _outcome_of_get(aml_server, proxied[1], proxy, demo_cases, "bigjson")
    assert raised is None and proxy.big_finished


def test_a_compressed_answer_raises_compressed_answer(
    aml_server: SecuredServer, proxied: tuple[HostileProxy, str], proxy: HostileProxy, demo_cases: Cases
) -> None:
    raised, _ = _outcome_of_get(aml_server, proxied[1], proxy, demo_cases, "gzip")
    assert isinstance(raised, CompressedAnswer), raised


def test_an_answer_about_another_task_raises_wrong_task(
    aml_server: SecuredServer, proxied: tuple[HostileProxy, str], proxy: HostileProxy, demo_cases: Cases
) -> None:
    raised, _ = _outcome_of_get(aml_server, proxied[1], proxy, demo_cases, "othertask")
    assert isinstance(raised, WrongTask), raised
    assert OTHER_CANARY not in str(raised)
