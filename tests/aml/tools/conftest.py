"""The demo corpus the AML tool servers are loaded with, known to the tests too."""

from __future__ import annotations

from pathlib import Path

import pytest

from aml_mcp.aml.demo.corpus import TENANTS, DemoNote, generate_notes
from tests.aml.tools.aml_client import NOTES_PER_BANK, load_demo


@pytest.fixture(scope="session")
def demo_notes() -> dict[str, list[DemoNote]]:
    """The demo corpus every test server holds, by bank."""
    return {t.name: generate_notes(t, NOTES_PER_BANK) for t in TENANTS}


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory holding the demo corpus as a first start loads it; each server gets a copy."""
    template = tmp_path_factory.mktemp("aml-demo")
    assert load_demo(template) == {tenant.name: NOTES_PER_BANK for tenant in TENANTS}
    return template
