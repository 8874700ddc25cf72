"""`aml-mcp audit tail` prints attacker-chosen fields escaped: ASCII JSON, one line per event (L9)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.storage.sqlite import AUDIT_COMPONENT, AUDIT_MIGRATIONS, SqliteAuditTable
from aml_mcp.cli import main as cli_main
from aml_mcp.store.sqlite import SqliteDatabase

HOSTILE = [
    "a\u2028b\u0085c",
    "csi\u009b31m",
    "esc\x1b]0;title\x07",
    "\u2029",
    "bidi\u202etxt",
    "\u00e9t\u00e9",
]


def test_tail_escapes_line_separators_and_terminal_controls(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    async def record() -> None:
        database = SqliteDatabase(tmp_path / "aml-mcp.db")
        database.open()
        await database.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        log = AuditLog([SqliteAuditTable(database)])  # distinct targets: each its own record
        for value in HOSTILE:
            log.record(
                AuditEvent(
                    decision=Decision.DENY,
                    reason="no_token",
                    target=value,
                    detail={"unverified": {"sub": value}},
                )
            )
        log.close()
        database.close()

    asyncio.run(record())
    assert cli_main(["audit", "tail", "--data-dir", str(tmp_path), "-n", "50"]) == 0
    out = capsysbinary.readouterr().out
    assert out.isascii()
    lines = out.decode("ascii").splitlines()
    assert len(lines) == len(HOSTILE)
    events = [json.loads(line) for line in lines]
    assert [e["target"] for e in events] == HOSTILE
    assert [e["detail"]["unverified"]["sub"] for e in events] == HOSTILE
