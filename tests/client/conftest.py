"""The AML server the client tests call, over a real socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.aml.notes.model import CaseNote
from tests.aml.tools.aml_client import load_demo
from tests.support.aml_live import demo_cases_by_bank, live_aml_server
from tests.support.oauth import SecuredServer, TestIssuer


@pytest.fixture(scope="session")
def client_demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    template = tmp_path_factory.mktemp("client-demo")
    load_demo(template)
    return template


@pytest.fixture(scope="session")
def demo_cases() -> dict[str, dict[str, list[CaseNote]]]:
    return demo_cases_by_bank()


@pytest.fixture(scope="module")
def aml_server(
    tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer, client_demo_data: Path
) -> Iterator[SecuredServer]:
    with live_aml_server(tmp_path_factory.mktemp("client-aml"), issuer, client_demo_data) as server:
        yield server
