"""A real AML server over a real socket (for tests of clients: the Python client and the CLI), the
demo cases it holds, and a record of the MCP methods a client sent."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.notes.model import CaseNote
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.client import BearerAuth
from tests.aml.tools.aml_client import FAST_TASKS, NOTES_PER_BANK
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

ALL_SCOPES = "aml:read aml:eval aml:draft"


@contextlib.contextmanager
def live_aml_server(data_dir: Path, issuer: TestIssuer, demo: Path, **aml: Any) -> Iterator[SecuredServer]:
    """The AML tools, auth on, over HTTP on 127.0.0.1, on a copy of the demo-loaded directory `demo`."""
    shutil.copytree(demo, data_dir, dirs_exist_ok=True)
    settings = AmlSettings(demo_notes_per_tenant=NOTES_PER_BANK, **aml)
    with secured_server(
        data_dir,
        None,
        issuer=issuer,
        aml=settings,
        tasks=FAST_TASKS,
        real_socket=True,
    ) as server:
        yield server


def mcp_url(server: SecuredServer) -> str:
    return f"{server.url}/mcp"


def demo_cases_by_bank() -> dict[str, dict[str, list[CaseNote]]]:
    """The demo corpus's cases by bank (what every server here holds)."""
    out: dict[str, dict[str, list[CaseNote]]] = {}
    for tenant in TENANTS:
        cases: dict[str, list[CaseNote]] = {}
        for demo in generate_notes(tenant, NOTES_PER_BANK):
            cases.setdefault(demo.note.case_id, []).append(demo.note)
        out[tenant.name] = cases
    return out


def case_needing_dob(cases: dict[str, list[CaseNote]]) -> str:
    """A case whose only missing fact is its first subject's date of birth: the draft asks once."""
    return next(
        case_id
        for case_id, notes in cases.items()
        if notes[0].subjects[0].date_of_birth is None
        and all(s.account_id for s in notes[0].subjects)
        and all(s.date_of_birth or s.entity for s in notes[0].subjects[1:])
    )


def complete_case(cases: dict[str, list[CaseNote]]) -> str:
    """A case whose notes hold every fact the SAR needs: the draft asks nothing."""
    return next(c for c, ns in cases.items() if all(s.date_of_birth and s.account_id for s in ns[0].subjects))


class MethodLog:
    """Every MCP method the client sent, read from its `Mcp-Method` header (a real HTTP hook)."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def __call__(self, request: httpx2.Request) -> None:
        method = request.headers.get("mcp-method")
        if method:
            self.methods.append(method)

    def count(self, method: str) -> int:
        return self.methods.count(method)


def http_client(token: str, log: MethodLog) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        auth=BearerAuth(token), timeout=httpx2.Timeout(30, read=300), event_hooks={"request": [log]}
    )
