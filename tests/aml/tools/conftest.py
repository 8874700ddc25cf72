"""Real servers serving the AML catalog over HTTP with real tokens, on a small demo corpus.

Each test module starts its own server (module-scoped) on its own data directory, loaded with
`NOTES_PER_BANK` demo notes per bank the way `aml-mcp serve` loads them on a first start. The
generated demo notes are kept in memory too, so tests know which notes belong to which bank.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, DemoNote, generate_notes
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes import CaseNote
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.tasks.settings import TaskSettings
from tests.support.mcp_http import TASKS_EXTENSION
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

NOTES_PER_BANK = 150
A, B, C = (t.name for t in TENANTS)
WITH_TASKS: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}, "elicitation": {}}
TASKS_ONLY: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}}
FAST_TASKS = TaskSettings(poll_interval_ms=50, heartbeat_ms=200, lease_ms=2000, claim_interval_ms=500)


@pytest.fixture(scope="session")
def demo_notes() -> dict[str, list[DemoNote]]:
    """The demo corpus every test server holds, by bank."""
    return {t.name: generate_notes(t, NOTES_PER_BANK) for t in TENANTS}


def cases_of(notes: list[DemoNote]) -> dict[str, list[CaseNote]]:
    out: dict[str, list[CaseNote]] = {}
    for demo in notes:
        out.setdefault(demo.note.case_id, []).append(demo.note)
    return out


@contextlib.contextmanager
def aml_server(data_dir: Path, issuer: TestIssuer, **aml: Any) -> Iterator[AmlClient]:
    """The default catalog (the AML tools) on a demo-loaded data directory, auth on."""
    settings = AmlSettings(demo_notes_per_tenant=NOTES_PER_BANK, **aml)
    load_demo_if_empty(settings, data_dir)
    with secured_server(data_dir, None, issuer=issuer, aml=settings, tasks=FAST_TASKS) as server:  # type: ignore[arg-type]
        yield AmlClient(server)


class AmlClient:
    """Calls the AML tools as a given caller (tenant, subject, client, scopes), over real HTTP."""

    def __init__(self, server: SecuredServer) -> None:
        self.server = server
        self._tokens: dict[tuple[str, str, str, str], str] = {}
        listed = server.post("tools/list", token=self.token(A, "aml:read")).json()["result"]["tools"]
        self.tools = {tool["name"]: tool for tool in listed}

    def token(self, tenant: str, scope: str, subject: str = "analyst", client_id: str = "copilot") -> str:
        key = (tenant, scope, subject, client_id)
        if key not in self._tokens:
            self._tokens[key] = self.server.mint(
                tenant=tenant, scope=scope, subject=subject, client_id=client_id
            )
        return self._tokens[key]

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant: str,
        scope: str,
        capabilities: dict[str, Any] | None = None,
        **who: str,
    ) -> httpx.Response:
        return self.server.post(
            "tools/call",
            {"name": name, "arguments": arguments},
            token=self.token(tenant, scope, **who),
            capabilities=capabilities if capabilities is not None else WITH_TASKS,
        )

    def result(self, name: str, arguments: dict[str, Any], *, tenant: str, scope: str = "aml:read") -> Any:
        """A synchronous call's result (asserting HTTP 200 and a JSON-RPC result)."""
        response = self.call(name, arguments, tenant=tenant, scope=scope)
        assert response.status_code == 200, response.text
        return response.json()["result"]

    def search(self, tenant: str, **arguments: Any) -> list[dict[str, Any]]:
        result = self.result("search_aml_notes", arguments, tenant=tenant)
        assert result.get("isError") is not True, result
        hits: list[dict[str, Any]] = result["structuredContent"]["results"]
        return hits

    # -- tasks ------------------------------------------------------------------------------------

    def start(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        tenant: str,
        scope: str,
        capabilities: dict[str, Any] | None = None,
        **who: str,
    ) -> str:
        response = self.call(name, arguments, tenant=tenant, scope=scope, capabilities=capabilities, **who)
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert result["resultType"] == "task", result
        task_id: str = result["taskId"]
        return task_id

    def task(self, method: str, task_id: str, *, tenant: str, scope: str, **extra: Any) -> httpx.Response:
        return self.server.post(
            method, {"taskId": task_id, **extra}, token=self.token(tenant, scope), capabilities=WITH_TASKS
        )

    def get(self, task_id: str, *, tenant: str, scope: str) -> dict[str, Any]:
        response = self.task("tasks/get", task_id, tenant=tenant, scope=scope)
        assert response.status_code == 200, response.text
        state: dict[str, Any] = response.json()["result"]
        return state

    def wait_for(
        self, task_id: str, *statuses: str, tenant: str, scope: str, within: float = 30.0
    ) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while True:
            state = self.get(task_id, tenant=tenant, scope=scope)
            if state["status"] in statuses:
                return state
            assert time.monotonic() < deadline, (
                f"task stayed {state['status']} ({state.get('statusMessage')})"
            )
            time.sleep(0.02)


def assert_matches_output_schema(tool: dict[str, Any], structured: Any) -> None:
    """`structuredContent` conforms to the tool's declared `outputSchema` (as listed)."""
    validator = jsonschema_rs.validator_for(tool["outputSchema"])
    errors = [e.message for e in validator.iter_errors(structured)]
    assert not errors, errors[:5]
