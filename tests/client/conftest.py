"""A real AML server over a real socket for the client tests, and tokens for it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.aml.settings import AmlSettings
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
