"""A damaged notes.db: /readyz says so (a reason code; the reason is logged) and a search answers a clear
tool error."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.storage.sqlite import DB_FILE_NAME
from aml_mcp.aml.settings import AmlSettings
from tests.aml.tools.aml_client import NOTES_PER_BANK, A, AmlClient
from tests.support.damaged_files import checkpointed, scramble_middle
from tests.support.oauth import TestIssuer, secured_server


@pytest.mark.parametrize("damaged", [False, True], ids=["sound", "damaged"])
def test_readiness_and_search_on_a_damaged_notes_store(
    damaged: bool, tmp_path: Path, issuer: TestIssuer
) -> None:
    settings = AmlSettings(embedder="static", demo_notes_per_tenant=NOTES_PER_BANK)
    load_demo_if_empty(settings, tmp_path)
    if damaged:
        checkpointed(tmp_path / DB_FILE_NAME)
        scramble_middle(tmp_path / DB_FILE_NAME)
    with secured_server(tmp_path, None, issuer=issuer, aml=settings, real_socket=True) as server:  # type: ignore[arg-type]
        ready = httpx.get(f"{server.url}/readyz")
        response = AmlClient(server).call(
            "search_aml_notes", {"query": "cash deposits"}, tenant=A, scope="aml:read"
        )
    assert response.status_code == 200
    body = response.json()
    if not damaged:
        assert ready.status_code == 200
        assert body["result"].get("isError") is not True
        return
    assert ready.status_code == 503
    assert ready.json() == {"status": "not_ready", "reasons": ["notes_unavailable"]}
    assert "error" not in body, body  # not -32603 Internal server error
    result = body["result"]
    assert result["isError"] is True
    assert "case-notes store is damaged" in result["content"][0]["text"]
