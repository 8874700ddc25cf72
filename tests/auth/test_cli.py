"""The auth subcommands of `aml-mcp` and the rule that keeps an unauthenticated server on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.table import AUDIT_COMPONENT, AUDIT_MIGRATIONS, StoreSink
from aml_mcp.cli import main as cli_main
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase


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


def test_audit_tail_prints_the_newest_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def record() -> None:
        database = SqliteDatabase(tmp_path / "aml-mcp.db")
        database.open()
        await database.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        log = AuditLog([StoreSink(database)])
        principal = Principal("https://id.example", "alice", "bank-a", "cli", token_id="j")
        for n in range(5):
            log.record(AuditEvent.about(principal, decision=Decision.ALLOW, reason="ok", target=f"t{n}"))
        log.record(AuditEvent(decision=Decision.DENY, reason="no_token", method="tools/call"))
        log.close()
        database.close()

    asyncio.run(record())
    assert cli_main(["audit", "tail", "--data-dir", str(tmp_path), "-n", "3"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["target"], e["reason"]) for e in lines] == [("t3", "ok"), ("t4", "ok"), (None, "no_token")]
    assert lines[0]["subject"] == "alice" and lines[0]["tenant"] == "bank-a"


def test_audit_tail_on_an_empty_data_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["audit", "tail", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out == ""


def test_revoke_list_and_lift(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The server this data directory belongs to trusts https://id.example (as its settings say).
    monkeypatch.setenv("AML_MCP_AUTH__ISSUERS", '[{"issuer": "https://id.example"}]')
    base = ["revoke", "--data-dir", str(tmp_path)]
    assert cli_main([*base, "--jti", "tok-1", "--note", "leaked"]) == 0
    assert cli_main([*base, "--subject", "bob", "--issuer", "https://id.example"]) == 0
    assert cli_main([*base, "--subject", "bob"]) == 2  # a subject needs its issuer
    capsys.readouterr()
    assert cli_main([*base, "--list"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(e["kind"], e["issuer"], e["value"], e["note"]) for e in listed] == [
        ("jti", "", "tok-1", "leaked"),
        ("subject", "https://id.example", "bob", None),
    ]
    assert cli_main([*base, "--jti", "tok-1", "--lift"]) == 0
    assert cli_main([*base, "--jti", "tok-1", "--lift"]) == 1  # nothing left to lift


def test_client_secret_command_prints_the_service_clients_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from aml_mcp.devauth.wiring import service_client_secret

    assert cli_main(["devauth", "client-secret", "--data-dir", str(tmp_path)]) == 0
    assert capsys.readouterr().out.strip() == service_client_secret(tmp_path)
