"""D10: a database fault under any request is answered 503 with `Retry-After` and a JSON-RPC body,
never another 5xx, an "Internal error" or a tool error blaming nothing the client can act on.

One AML server with the development authorization server and the lab, on a PostgreSQL server of
the test's own. Each surface (a sync `tools/call` that reads the notes, a task create, `tasks/get`,
`subscriptions/listen`, the lab's audit view, the authorization server's registration and keys) is
sent right after every aml-mcp connection was terminated, and again while the server is stopped.
The audit trail is set to fail open here so every request reaches its own store (with the default,
fail closed, the refusal while the trail is down is the audit's 503, tested in
`test_audit_across_resets.py`).

Before: the sync search answered a tool error, the create and `tasks/*` a -32010 at HTTP 200, and
`subscriptions/listen` HTTP 500 ("scope rule for subscriptions/listen raised"), the lab's audit
view HTTP 500 (Starlette's plain-text page).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.store.postgres import PostgresDatabase
from tests.aml.tools.aml_client import FAST_TASKS, NOTES_PER_BANK, A
from tests.support.mcp_http import TASKS_ONLY, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server
from tests.support.private_postgres import PrivatePostgres
from tests.support.waiting import eventually

pytestmark = pytest.mark.faults

SCHEMA = "d10_answers"
SETTINGS = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK)
SCOPES = "aml:read aml:draft aml:admin"


@dataclass
class Surfaces:
    server: SecuredServer
    http: httpx.Client
    """A client that opens a connection per request: one answer's connection handling never
    decides how the next request fares."""
    token: str
    task_id: str

    def mcp(self, method: str, params: dict[str, Any]) -> httpx.Response:
        body = message(method, params, capabilities=TASKS_ONLY)
        headers = {**headers_for(body), "authorization": f"Bearer {self.token}"}
        return self.http.post("/mcp", content=json.dumps(body), headers=headers, timeout=30)

    def search(self) -> httpx.Response:
        return self.mcp("tools/call", {"name": "search_aml_notes", "arguments": {"query": "structuring"}})

    def create(self) -> httpx.Response:
        return self.mcp("tools/call", {"name": "draft_sar_batch", "arguments": {"case_ids": ["MRD-C000001"]}})

    def get(self) -> httpx.Response:
        return self.mcp("tasks/get", {"taskId": self.task_id})

    def listen(self) -> httpx.Response:
        body = message(
            "subscriptions/listen", {"notifications": {"taskIds": [self.task_id]}}, capabilities=TASKS_ONLY
        )
        headers = {**headers_for(body), "authorization": f"Bearer {self.token}"}
        with self.http.stream(
            "POST", "/mcp", content=json.dumps(body), headers=headers, timeout=30
        ) as response:
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                return httpx.Response(response.status_code, headers=response.headers)  # opened: fine
            response.read()
            return response

    def lab_audit(self) -> httpx.Response:
        return self.http.get("/lab/api/audit", headers={"authorization": f"Bearer {self.token}"}, timeout=30)

    def register(self) -> httpx.Response:
        client = {"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"}
        return self.http.post("/oauth/register", json=client, timeout=30)

    def jwks(self) -> httpx.Response:
        return self.http.get("/oauth/jwks.json", timeout=30)

    def all(self) -> dict[str, Callable[[], httpx.Response]]:
        return {
            "tools/call search_aml_notes (sync)": self.search,
            "tools/call draft_sar_batch (task create)": self.create,
            "tasks/get": self.get,
            "subscriptions/listen": self.listen,
            "lab audit view": self.lab_audit,
            "authorization server: register": self.register,
            "authorization server: jwks": self.jwks,
        }


@pytest.fixture(scope="module")
def surfaces(
    private_postgres: PrivatePostgres, tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[Surfaces]:
    with PostgresNotes(PostgresDatabase(private_postgres.url, schema=SCHEMA)) as store:
        load_demo_if_empty(SETTINGS, tmp_path_factory.mktemp("unused"), store=store)
    with (
        contextlib.ExitStack() as stack,
        secured_server(
            tmp_path_factory.mktemp("d10"),
            None,
            issuer=issuer,
            auth=auth_settings([issuer], dev=True, audit_fail_open=True),
            real_socket=True,
            aml=SETTINGS,
            tasks=FAST_TASKS,
            database_url=private_postgres.url,
            database_schema=SCHEMA,
        ) as server,
    ):
        token = server.mint(tenant=A, scope=SCOPES, subject="analyst", client_id="copilot")
        http = stack.enter_context(
            httpx.Client(base_url=server.url, limits=httpx.Limits(max_keepalive_connections=0))
        )
        surfaces = Surfaces(server, http, token, "")
        created = surfaces.create()
        assert created.status_code == 200, created.text
        surfaces.task_id = created.json()["result"]["taskId"]
        for name, send in surfaces.all().items():  # every surface works while the database does
            assert send().status_code < 300, name
        yield surfaces


def defects(name: str, response: httpx.Response) -> list[str]:
    """What is wrong with `response` as the answer to a request sent during a database fault."""
    status = response.status_code
    if status == 503:
        found = (
            [] if response.headers.get("retry-after", "").isdigit() else [f"{name}: 503 without Retry-After"]
        )
        if name.startswith("authorization server"):
            return found  # OAuth's own error shape (RFC 6749 temporarily_unavailable) for its clients
        try:
            body = response.json()
        except ValueError:
            return [*found, f"{name}: 503 without a JSON body: {response.text[:80]!r}"]
        if not (
            isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("error"), dict)
        ):
            found.append(f"{name}: 503 without a JSON-RPC error body: {body!r}")
        return found
    if status >= 500:
        return [f"{name}: HTTP {status}: {response.text[:120]!r}"]
    if status >= 300:
        return []  # a client error is the request's own (none of these requests is malformed)
    if "json" not in response.headers.get("content-type", ""):
        return []
    body = response.json()
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        return [f"{name}: HTTP {status} with JSON-RPC error {body['error']}"]
    result = body.get("result") if isinstance(body, dict) else None
    if isinstance(result, dict) and result.get("isError"):
        return [f"{name}: HTTP {status} with a tool error: {result['content'][0]['text']!r}"]
    return []


def test_right_after_every_connection_is_terminated_each_surface_answers_503_or_succeeds(
    surfaces: Surfaces, private_postgres: PrivatePostgres
) -> None:
    found: list[str] = []
    statuses: dict[str, int] = {}
    for name, send in surfaces.all().items():
        eventually(lambda s=send: s().status_code < 300, timeout=30, what=f"{name} to work")  # pools refilled
        private_postgres.terminate_all()
        response = send()
        statuses[name] = response.status_code
        found += defects(name, response)
    print("after terminate_all:", statuses)
    assert not found, found
    assert 503 in statuses.values()  # the resets did reach the requests


def test_while_the_database_is_stopped_each_surface_answers_503(
    surfaces: Surfaces, private_postgres: PrivatePostgres
) -> None:
    sends = surfaces.all()
    private_postgres.stop()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(len(sends)) as pool:
            responses = dict(zip(sends, pool.map(lambda send: send(), sends.values()), strict=True))
        took = time.monotonic() - started
    finally:
        private_postgres.start()
    statuses = {name: response.status_code for name, response in responses.items()}
    print(f"while stopped ({took:.1f} s):", statuses)
    found = [defect for name, response in responses.items() for defect in defects(name, response)]
    assert not found, found
    for name in ("tools/call search_aml_notes (sync)", "tools/call draft_sar_batch (task create)"):
        assert statuses[name] == 503, (name, responses[name].text)
    # Back: the same requests succeed again once the pools have reconnected.
    deadline = time.monotonic() + 30
    while surfaces.search().status_code != 200:
        assert time.monotonic() < deadline, "search did not recover within 30 s of the restart"
        time.sleep(0.2)
