"""Real servers serving the AML catalog with real tokens, on a small demo corpus, and the client the AML
tool tests call them with.

Each test module starts its own server (module-scoped) on its own data directory: a copy of one
directory loaded once per session with `NOTES_PER_BANK` demo notes per bank, the way `aml-mcp
serve` loads them on a first start (the `demo_data` fixture). The
generated demo notes are kept in memory too (the `demo_notes` fixture), so tests know which notes
belong to which bank.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema_rs

from aml_mcp.aml.demo.corpus import TENANTS, DemoNote
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.model import CaseNote
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.tasks.settings import TaskSettings
from tests.support.mcp_http import WITH_TASKS, call_tool, create, get, task_request, wait_for
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

NOTES_PER_BANK = 150
A, B, C = (t.name for t in TENANTS)
FAST_TASKS = TaskSettings(poll_interval_ms=50, heartbeat_ms=200, lease_ms=2000, claim_interval_ms=500)


def cases_of(notes: list[DemoNote]) -> dict[str, list[CaseNote]]:
    out: dict[str, list[CaseNote]] = {}
    for demo in notes:
        out.setdefault(demo.note.case_id, []).append(demo.note)
    return out


def load_demo(data_dir: Path) -> dict[str, int]:
    """The demo corpus loaded into `data_dir` as `aml-mcp serve` does on a first start; notes per bank."""
    return load_demo_if_empty(AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK), data_dir)


@contextlib.contextmanager
def aml_server(data_dir: Path, issuer: TestIssuer, *, demo: Path, **aml: Any) -> Iterator[AmlClient]:
    """The default catalog (the AML tools) on a copy of the demo-loaded data directory `demo`, auth on."""
    shutil.copytree(demo, data_dir, dirs_exist_ok=True)
    settings = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK, **aml)
    assert load_demo_if_empty(settings, data_dir) == {}  # a loaded store is left alone, as on a restart
    with secured_server(data_dir, None, issuer=issuer, aml=settings, tasks=FAST_TASKS) as server:  # type: ignore[arg-type]
        yield AmlClient(server)


class AmlClient:
    """Calls the AML tools as a given caller (tenant, subject, client, scopes)."""

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
        return call_tool(
            self.server.http,
            name,
            arguments,
            capabilities=capabilities if capabilities is not None else WITH_TASKS,
            token=self.token(tenant, scope, **who),
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
        created = create(
            self.server.http,
            name,
            arguments,
            capabilities=capabilities if capabilities is not None else WITH_TASKS,
            token=self.token(tenant, scope, **who),
        )
        task_id: str = created["taskId"]
        return task_id

    def task(self, method: str, task_id: str, *, tenant: str, scope: str, **extra: Any) -> httpx.Response:
        return task_request(self.server.http, method, task_id, extra=extra, token=self.token(tenant, scope))

    def get(self, task_id: str, *, tenant: str, scope: str) -> dict[str, Any]:
        return get(self.server.http, task_id, token=self.token(tenant, scope))

    def wait_for(
        self, task_id: str, *statuses: str, tenant: str, scope: str, within: float = 30.0
    ) -> dict[str, Any]:
        return wait_for(self.server.http, task_id, *statuses, within=within, token=self.token(tenant, scope))


def assert_matches_output_schema(tool: dict[str, Any], structured: Any) -> None:
    """`structuredContent` conforms to the tool's declared `outputSchema` (as listed)."""
    validator = jsonschema_rs.validator_for(tool["outputSchema"])
    errors = [e.message for e in validator.iter_errors(structured)]
    assert not errors, errors[:5]
