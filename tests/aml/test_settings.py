"""AML settings: bounds, normalised typology codes, and the environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aml_mcp.aml.settings import AmlSettings
from aml_mcp.config import Settings


def test_settings_bounds_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert AmlSettings(extra_typology_codes=["Pig Butchering"]).extra_typology_codes == ["pig_butchering"]
    for bad in ({"demo_notes_per_tenant": 100_001}, {"search_default_top_k": 0}, {"eval_slice_ms": 5}):
        with pytest.raises(ValidationError):
            AmlSettings(**bad)
    monkeypatch.setenv("AML_MCP_AML__DEMO_NOTES_PER_TENANT", "500")
    monkeypatch.setenv("AML_MCP_AML__EXTRA_TYPOLOGY_CODES", '["romance_fraud"]')
    settings = Settings()
    assert settings.aml.demo_notes_per_tenant == 500 and settings.aml.extra_typology_codes == [
        "romance_fraud"
    ]
