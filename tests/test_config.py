"""Settings precedence: defaults < TOML file < environment < explicit flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from aml_mcp.config import load_settings


def test_defaults_are_a_loopback_server_with_a_local_data_dir(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AML_MCP_HOST", "AML_MCP_PORT", "AML_MCP_DATA_DIR"):
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert (settings.host, settings.port, settings.data_dir) == ("127.0.0.1", 8000, Path("var"))
    assert settings.resource_url == "http://127.0.0.1:8000/mcp"
    assert settings.binds_loopback
    assert settings.max_body_bytes == 1024 * 1024


def test_toml_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "aml.toml"
    config.write_text('port = 9000\nlog_level = "debug"\nmax_body_bytes = 2048\nhost = "127.0.0.1"\n')
    monkeypatch.setenv("AML_MCP_LOG_LEVEL", "warning")
    monkeypatch.setenv("AML_MCP_PORT", "9100")
    settings = load_settings(config, port=9200)
    assert settings.max_body_bytes == 2048  # only in the file
    assert settings.log_level == "warning"  # environment beats file
    assert settings.port == 9200  # flag beats environment


def test_unknown_settings_and_bad_values_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("no_such_setting = 1\n")
    with pytest.raises(ValidationError):
        load_settings(config)
    with pytest.raises(ValidationError):
        load_settings(log_level="chatty")
    with pytest.raises(FileNotFoundError):
        load_settings(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("10.1.2.3", False)],  # noqa: S104
)
def test_loopback_detection(host: str, loopback: bool) -> None:
    assert load_settings(host=host).binds_loopback is loopback


def test_ipv6_resource_url_is_bracketed() -> None:
    assert load_settings(host="::1", port=8123).resource_url == "http://[::1]:8123/mcp"


def test_the_shared_database_is_off_by_default_and_must_be_postgresql(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AML_MCP_DATABASE_URL", raising=False)
    assert load_settings().database_url is None
    monkeypatch.setenv("AML_MCP_DATABASE_URL", "postgresql://aml@db.example:5432/aml")
    monkeypatch.setenv("AML_MCP_DATABASE_SCHEMA", "aml_prod")
    settings = load_settings()
    assert (settings.database_url, settings.database_schema) == (
        "postgresql://aml@db.example:5432/aml",
        "aml_prod",
    )
    for bad in ({"database_url": "mysql://x/y"}, {"database_schema": "Prod; DROP"}):
        with pytest.raises(ValidationError):
            load_settings(**bad)
