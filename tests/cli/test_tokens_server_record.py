"""`aml-mcp token` and `aml-mcp revoke` act for the server that owns the data directory: what that
server recorded when it started (its address and trusted issuers) decides, not the command's own
defaults — so a token minted without `--port` is accepted by a server started on another port,
and a revocation for an issuer the server was given in code is accepted as trusted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.catalog import Catalog
from aml_mcp.cli import main as cli_main
from aml_mcp.server_record import RECORD_FILE, ServerRecord
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server


@pytest.fixture(scope="module")
def issuer() -> Iterator[TestIssuer]:
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    auth = auth_settings([issuer], dev=True)
    with secured_server(tmp_path_factory.mktemp("record"), Catalog(), auth=auth) as running:
        yield running


def test_the_server_records_its_address_and_issuers_owner_only(
    server: SecuredServer, issuer: TestIssuer
) -> None:
    record = ServerRecord.read(server.data_dir)
    assert record is not None
    assert record.resource_url == f"{server.url}/mcp"
    assert record.trusted_issuers == (f"{server.url}/oauth", issuer.issuer)
    assert (server.data_dir / RECORD_FILE).stat().st_mode & 0o777 == 0o600


def test_a_token_minted_without_a_port_is_accepted(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    argv = ["token", "--data-dir", str(server.data_dir), "--subject", "alice", "--tenant", "meridian-bank"]
    assert cli_main(argv) == 0
    token = capsys.readouterr().out.strip()
    assert server.post("tools/list", {}, token=token).status_code == 200


def test_a_port_flag_still_wins_over_the_record(
    server: SecuredServer, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    argv = [
        "token",
        "--data-dir",
        str(server.data_dir),
        "--port",
        "1",
        "--subject",
        "a",
        "--tenant",
        "t",
        "-v",
    ]
    assert cli_main(argv) == 0
    claims = json.loads(capsys.readouterr().err)
    assert claims["aud"] == "http://127.0.0.1:1/mcp"


def test_revoking_for_an_issuer_the_server_was_given_in_code_is_accepted(
    server: SecuredServer, issuer: TestIssuer
) -> None:
    base = ["revoke", "--data-dir", str(server.data_dir)]
    assert cli_main([*base, "--subject", "mallory", "--issuer", issuer.issuer]) == 0
    assert cli_main([*base, "--subject", "mallory", "--issuer", issuer.issuer + "/"]) != 0  # a near miss
    assert cli_main([*base, "--subject", "mallory", "--issuer", issuer.issuer, "--lift"]) == 0


def test_a_damaged_record_is_ignored(tmp_path: Path) -> None:
    (tmp_path / RECORD_FILE).write_text("{not json")
    assert ServerRecord.read(tmp_path) is None
    (tmp_path / RECORD_FILE).write_text(json.dumps({"resource_url": 5, "trusted_issuers": []}))
    assert ServerRecord.read(tmp_path) is None
    (tmp_path / RECORD_FILE).write_text(json.dumps({"resource_url": "http://x/mcp", "trusted_issuers": "ab"}))
    assert ServerRecord.read(tmp_path) is None
