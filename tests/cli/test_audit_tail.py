"""`aml-mcp audit tail`: the newest audit events as JSON lines."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.storage.sqlite import AUDIT_COMPONENT, AUDIT_MIGRATIONS, SqliteAuditTable
from aml_mcp.cli import main as cli_main
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase


def test_audit_tail_prints_the_newest_events(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def record() -> None:
        database = SqliteDatabase(tmp_path / "aml-mcp.db")
        database.open()
        await database.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        log = AuditLog([SqliteAuditTable(database)])
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
