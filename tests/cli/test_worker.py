"""Roles that need the shared database refuse clearly without one, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from aml_mcp.cli import main
from aml_mcp.cli.startup import EXIT_SETTINGS
from aml_mcp.config import Settings


@pytest.fixture(autouse=True)
def _no_database_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AML_MCP_DATABASE_URL", raising=False)
    monkeypatch.delenv("AML_MCP_ROLE", raising=False)


def test_the_api_role_needs_a_shared_database() -> None:
    with pytest.raises(ValidationError, match="role 'api' needs database_url"):
        Settings(role="api")
    assert Settings(role="api", database_url="postgresql://db.example/x").role == "api"


def test_serve_with_role_api_and_no_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", "--role", "api", "--data-dir", str(tmp_path), "--port", "0"]) == EXIT_SETTINGS
    assert "role 'api' needs database_url" in capsys.readouterr().err


def test_conformance_server_with_role_api_and_no_database_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["conformance-server", "--role", "api", "--data-dir", str(tmp_path), "--port", "0"]
    assert main(args) == EXIT_SETTINGS
    assert "role 'api' needs database_url" in capsys.readouterr().err


def test_a_worker_without_a_database_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--catalog", "conformance", "--data-dir", str(tmp_path)]) == EXIT_SETTINGS
    assert "worker needs --database-url" in capsys.readouterr().err
