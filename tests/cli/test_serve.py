"""`aml-mcp serve` keeps an unauthenticated server, or the development issuer, on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.cli.serve import serve_refusal
from aml_mcp.config import AuthSettings, Settings


@pytest.mark.parametrize(
    "env",
    [{"AML_MCP_AUTH__ENABLED": "false"}, {}],
    ids=["auth off", "dev authorization server on"],
)
def test_serve_refuses_a_non_loopback_host_without_real_auth(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli_main(["serve", "--host", "0.0.0.0", "--data-dir", str(tmp_path)]) == 2  # noqa: S104
    assert "refusing to serve on 0.0.0.0" in capsys.readouterr().err


def test_serve_refuses_exposure(tmp_path: Path) -> None:
    def refusal(**auth: Any) -> str | None:
        return serve_refusal(Settings(host="0.0.0.0", data_dir=tmp_path, auth=AuthSettings(**auth)))  # noqa: S104

    assert "authentication off" in (refusal(enabled=False) or "")
    assert "development authorization server" in (refusal() or "")
    assert refusal(dev={"enabled": False}, issuers=[{"issuer": "https://id.example"}]) is None
    assert serve_refusal(Settings(data_dir=tmp_path, auth=AuthSettings(enabled=False))) is None


@pytest.mark.parametrize(
    "public_url",
    ["https://aml.bank.example/mcp", "http://10.0.0.5:8000/mcp", "aml.bank.example/mcp", "http://[::2]/mcp"],
)
def test_a_public_url_that_is_not_loopback_is_exposure(public_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, public_url=public_url)
    assert settings.binds_loopback and settings.exposed_at == public_url
    assert f"for the public URL {public_url}" in (serve_refusal(settings) or "")


@pytest.mark.parametrize(
    "public_url", ["http://127.0.0.1:9/mcp", "http://localhost/mcp", "http://[::1]:80/mcp"]
)
def test_a_loopback_public_url_is_not_exposure(public_url: str, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, public_url=public_url)
    assert settings.exposed_at is None and serve_refusal(settings) is None


def test_the_simulation_is_served_only_with_the_lab_and_the_development_server(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).simulation_served
    assert not Settings(data_dir=tmp_path, lab={"simulation": False}).simulation_served
    assert not Settings(data_dir=tmp_path, lab={"enabled": False}).simulation_served
    no_dev = AuthSettings(dev={"enabled": False}, issuers=[{"issuer": "https://id.example"}])
    assert not Settings(data_dir=tmp_path, auth=no_dev, lab={"enabled": True}).simulation_served


def test_serve_refuses_to_trust_no_one_before_loading_anything(tmp_path: Path) -> None:
    nobody = AuthSettings(dev={"enabled": False})
    refusal = serve_refusal(Settings(data_dir=tmp_path, auth=nobody)) or ""
    assert "no authorization server is trusted" in refusal and "AML_MCP_AUTH__ISSUERS" in refusal
    issuer = AuthSettings(dev={"enabled": False}, issuers=[{"issuer": "https://id.example"}])
    assert serve_refusal(Settings(data_dir=tmp_path, auth=issuer)) is None


def test_serve_with_no_trusted_issuer_exits_before_the_demo_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AML_MCP_AUTH__DEV__ENABLED", "false")
    assert cli_main(["serve", "--port", "0", "--data-dir", str(tmp_path)]) == 2
    assert "no authorization server is trusted" in capsys.readouterr().err
    assert not (tmp_path / "notes.db").exists()
