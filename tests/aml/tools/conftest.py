"""The demo corpus the AML tool servers are loaded with, known to the tests too."""

from __future__ import annotations

import pytest

from aml_mcp.aml.demo.corpus import TENANTS, DemoNote, generate_notes
from tests.aml.tools.aml_client import NOTES_PER_BANK


@pytest.fixture(scope="session")
def demo_notes() -> dict[str, list[DemoNote]]:
    """The demo corpus every test server holds, by bank."""
    return {t.name: generate_notes(t, NOTES_PER_BANK) for t in TENANTS}
