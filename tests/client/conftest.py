"""A real AML server over a real socket for the client tests, and tokens for it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.notes import CaseNote
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.client import BearerAuth
from tests.aml.tools.aml_client import FAST_TASKS, NOTES_PER_BANK, load_demo
from tests.support.oauth import SecuredServer, TestIssuer, secured_server

ALL_SCOPES = "aml:read aml:eval aml:draft"


@pytest.fixture(scope="session")
def client_demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = tmp_path_factory.mktemp("client-demo")
    load_demo(template)
    return template


@pytest.fixture(scope="module")
def aml_server(
    tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, client_demo_data: Path
) -> Iterator[SecuredServer]:
    """The AML tools, auth on, over HTTP on 127.0.0.1 (the client is a real HTTP client)."""
    data_dir = tmp_path_factory.mktemp("client-aml")
    shutil.copytree(client_demo_data, data_dir, dirs_exist_ok=True)
    settings = AmlSettings(demo_notes_per_tenant=NOTES_PER_BANK)
    with secured_server(
        data_dir,
        None,  # type: ignore[arg-type]
        issuer=issuer,
        aml=settings,
        tasks=FAST_TASKS,
        real_socket=True,
    ) as server:
        yield server


def mcp_url(server: SecuredServer) -> str:
    return f"{server.url}/mcp"


@pytest.fixture(scope="session")
def demo_cases() -> dict[str, dict[str, list[CaseNote]]]:
    """The demo corpus's cases by bank (what every server here holds)."""
    out: dict[str, dict[str, list[CaseNote]]] = {}
    for tenant in TENANTS:
        cases: dict[str, list[CaseNote]] = {}
        for demo in generate_notes(tenant, NOTES_PER_BANK):
            cases.setdefault(demo.note.case_id, []).append(demo.note)
        out[tenant.name] = cases
    return out


def case_needing_dob(cases: dict[str, list[CaseNote]]) -> str:
    """A case whose first subject has an account but no date of birth: the draft asks for one."""
    return next(
        case_id
        for case_id, notes in cases.items()
        if notes[0].subjects[0].date_of_birth is None
        and notes[0].subjects[0].account_id
        and all(s.account_id for s in notes[0].subjects)
        and all(s.date_of_birth for s in notes[0].subjects[1:])
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
