"""Auth settings: unsafe issuers are refused, and everything can come from the environment."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aml_mcp.auth.settings import IssuerSettings
from aml_mcp.config import Settings


@pytest.mark.parametrize(
    "issuer",
    [
        {"issuer": "http://id.example"},  # plain http off loopback
        {"issuer": "https://id.example", "algorithms": ["HS256"]},
        {"issuer": "https://id.example", "algorithms": ["none"]},
        {"issuer": "https://id.example", "jwks_uri": "https://id.example/keys#frag"},
    ],
)
def test_unsafe_issuer_settings_are_refused(issuer: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        IssuerSettings(**issuer)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AML_MCP_AUTH__TENANT_CLAIM", "https://aml.example/bank")
    monkeypatch.setenv("AML_MCP_AUTH__DEV__ENABLED", "false")
    monkeypatch.setenv("AML_MCP_AUTH__ISSUERS", json.dumps([{"issuer": "https://id.example"}]))
    settings = Settings(data_dir=tmp_path)
    assert settings.auth.enabled and not settings.auth.dev.enabled
    assert settings.auth.tenant_claim == "https://aml.example/bank"
    assert settings.auth.issuers[0].issuer == "https://id.example"
