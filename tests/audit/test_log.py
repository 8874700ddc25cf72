"""The audit log: a failing sink never breaks a request, and the JSON-lines sink writes every field."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.sinks import JsonLinesSink
from aml_mcp.principal import Principal


def test_audit_log_never_raises_and_writes_json_lines(tmp_path: Path) -> None:
    class Broken:
        def write_batch(self, events: Sequence[AuditEvent]) -> None:
            raise OSError("disk full")

    sink = JsonLinesSink(tmp_path / "audit.jsonl")
    log = AuditLog([Broken(), sink])
    principal = Principal("iss", "alice", "bank-a", "cli", token_id="j1")
    log.record(
        AuditEvent.about(principal, decision=Decision.ALLOW, reason="ok", method="tools/call", target="t")
    )
    log.record(AuditEvent(decision=Decision.DENY, reason="no_token", method="tools/list"))
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [line["reason"] for line in lines] == ["ok", "no_token"]
    assert lines[0]["subject"] == "alice" and lines[0]["token_id"] == "j1" and lines[1]["subject"] is None
    assert set(lines[0]) == {
        "time", "issuer", "subject", "tenant", "client_id", "token_id", "method", "target", "decision",
        "reason", "detail",
    }  # fmt: skip
