"""The audit writer itself, fed hostile events directly: real SQLite table, real JSON-lines file.

Another layer may refuse such input at the HTTP edge; the writer must hold on its own: an event
whose strings cannot be encoded (lone surrogates), whose detail holds raw unverified claims, or
that the table refuses, is written escaped or as a placeholder — and never costs its neighbours
their records, in either copy.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jwt
import pytest

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.events import MAX_DETAIL_CHARS, UNRECORDABLE
from aml_mcp.audit.sinks import JsonLinesSink
from aml_mcp.audit.storage.sqlite import AUDIT_COMPONENT, AUDIT_MIGRATIONS, SqliteAuditTable
from aml_mcp.auth.gate import _unverified_claims
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase
from tests.support.audit_trail import jsonl_events
from tests.support.oauth import audit_events

ALICE = Principal("https://id.example", "alice", "bank-a", "copilot", token_id="j")


@pytest.fixture
def database(tmp_path: Path) -> Iterator[SqliteDatabase]:
    db = SqliteDatabase(tmp_path / "aml-mcp.db")
    db.open()
    asyncio.run(db.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS))
    yield db
    db.close()


def _log(database: SqliteDatabase, tmp_path: Path, **options: Any) -> AuditLog:
    return AuditLog([SqliteAuditTable(database), JsonLinesSink(tmp_path / "audit.jsonl")], **options)


def _victim(n: int) -> AuditEvent:
    return AuditEvent.about(ALICE, decision=Decision.ALLOW, reason="ok", method="tools/call", target=f"v{n}")


def _hostile(n: int) -> list[AuditEvent]:
    """Every field an attacker can reach, holding a lone surrogate (and worse)."""
    token = jwt.encode(
        {"iss": "\ud800", "sub": f"\udfff{n}", "aud": ["\udc00", 7], "jti": "x" * 5000, "azp": "\u2028"},
        "k" * 32,
        algorithm="HS256",
    )
    return [
        AuditEvent(decision=Decision.DENY, reason="no_token", method="tools/call", target=f"\ud800{n}"),
        AuditEvent(decision=Decision.DENY, reason="no_token", method=f"\udbff{n}", target="x"),
        AuditEvent(decision=Decision.DENY, reason=f"bad\udc00{n}", method="tasks/get", target="\udc00abc"),
        AuditEvent(
            decision=Decision.DENY,
            reason="disallowed_algorithm",
            method="tools/call",
            target=f"t{n}",
            detail={"unverified": _unverified_claims(token)},
        ),
        AuditEvent(
            decision=Decision.DENY,
            reason="odd_detail",
            detail={"n": 10**5000, "f": float("nan"), "s": {1, 2}, "o": object(), "deep": [[[[[["x"]]]]]]},
        ),
    ]


def test_surrogate_laden_events_never_cost_their_neighbours(database: SqliteDatabase, tmp_path: Path) -> None:
    log = _log(database, tmp_path, anonymous_window_seconds=0)
    for n in range(40):
        log.record(_victim(n))
        for event in _hostile(n):
            log.record(event)
    log.close()

    victims = [f"v{n}" for n in range(40)]
    table = audit_events(tmp_path)
    lines = jsonl_events(tmp_path)
    assert [e["target"] for e in table if e["decision"] == "allow"] == victims
    assert [e["target"] for e in lines if e["decision"] == "allow"] == victims
    # Every hostile event is there as well, its surrogates shown as escapes, nothing a placeholder.
    assert len(table) == len(lines) == 40 * 6
    assert {e["reason"] for e in table} == {"ok", "no_token", "disallowed_algorithm", "odd_detail"} | {
        f"bad\\udc00{n}" for n in range(40)
    }
    assert "\\ud8000" in {e["target"] for e in table}
    assert "\\udbff0" in {e["method"] for e in lines}
    claims = next(e["detail"]["unverified"] for e in lines if e["reason"] == "disallowed_algorithm")
    assert claims["iss"] == "\\ud800" and claims["sub"] == "\\udfff0" and claims["aud"] == ["\\udc00", "7"]
    odd = next(e["detail"] for e in table if e["reason"] == "odd_detail")
    assert odd["n"] == "<integer out of range>" and odd["f"] == "nan" and odd["deep"] == [[["…"]]]
    stats = log.stats()
    assert all(sink.healthy and sink.placeholders == 0 and sink.dropped == 0 for sink in stats.sinks)
    assert stats.recorded == 40 * 6


def test_detail_is_capped(database: SqliteDatabase, tmp_path: Path) -> None:
    log = _log(database, tmp_path)
    huge = {f"claim{i}": "x" * 250 for i in range(30)}
    log.record(AuditEvent(decision=Decision.DENY, reason="bad_signature", detail={"unverified": huge}))
    log.close()
    (row,) = audit_events(tmp_path)
    stored = sqlite3.connect(tmp_path / "aml-mcp.db").execute("SELECT detail FROM audit_events").fetchone()[0]
    assert len(stored) <= MAX_DETAIL_CHARS and set(row["detail"]) == {"clipped"}
    assert len((tmp_path / "audit.jsonl").read_text()) < MAX_DETAIL_CHARS + 512


def test_a_row_the_table_refuses_becomes_a_placeholder_and_its_batch_is_kept(
    database: SqliteDatabase, tmp_path: Path
) -> None:
    # A real refusal by SQLite of one particular row (what a constraint or a bad value does).
    with sqlite3.connect(tmp_path / "aml-mcp.db") as conn:
        conn.execute(
            "CREATE TRIGGER refuse_one BEFORE INSERT ON audit_events WHEN NEW.reason = 'refused_by_table'"
            " BEGIN SELECT RAISE(ABORT, 'this row is refused'); END"
        )
    log = _log(database, tmp_path)
    for n in range(20):
        log.record(_victim(n))
        if n % 5 == 0:
            log.record(AuditEvent.about(ALICE, decision=Decision.DENY, reason="refused_by_table", target="p"))
    log.close()

    table = audit_events(tmp_path)
    assert [e["target"] for e in table if e["reason"] == "ok"] == [f"v{n}" for n in range(20)]
    placeholders = [e for e in table if e["reason"] == UNRECORDABLE]
    assert len(placeholders) == 4
    assert placeholders[0]["subject"] == "alice" and placeholders[0]["decision"] == "deny"
    assert placeholders[0]["detail"] == {"error": "IntegrityError", "reason": "refused_by_table"}
    store = log.stats().sinks[0]
    assert store.placeholders == 4 and store.healthy and store.failures == 0
    # The file, which had no trouble with those events, has them as they were.
    assert [e["reason"] for e in jsonl_events(tmp_path)].count("refused_by_table") == 4


class _Unformattable(AuditEvent):
    """An event whose formatting raises: whatever a future field might do, the batch survives it."""

    def as_record(self) -> dict[str, Any]:
        raise RuntimeError("cannot format")


def test_an_event_that_cannot_be_formatted_leaves_a_placeholder_in_both_copies(
    database: SqliteDatabase, tmp_path: Path
) -> None:
    log = _log(database, tmp_path)
    log.record(_victim(0))
    log.record(_Unformattable(decision=Decision.DENY, reason="no_token", target="\ud800"))
    log.record(_victim(1))
    log.close()
    for copy in (audit_events(tmp_path), jsonl_events(tmp_path)):
        assert [(e["target"], e["reason"]) for e in copy] == [
            ("v0", "ok"),
            ("\\ud800", UNRECORDABLE),
            ("v1", "ok"),
        ]
    assert [sink.placeholders for sink in log.stats().sinks] == [1, 1]


class _Stuck:
    """A sink that blocks until released, like a store waiting out another process's lock."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.written: list[AuditEvent] = []

    def write_batch(self, events: Sequence[AuditEvent]) -> int:
        self.release.wait(30)
        self.written += events
        return 0


def test_record_neither_blocks_nor_raises_while_a_sink_is_stuck() -> None:
    stuck = _Stuck()
    log = AuditLog([stuck], flush_seconds=0.01)
    log.record(_victim(0))
    time.sleep(0.1)  # the flusher is now inside the stuck sink
    for n in range(1, 10_001):
        log.record(_victim(n))
    assert stuck.written == []  # every record returned while the sink was still stuck
    stuck.release.set()
    log.close()
    assert [e.target for e in stuck.written] == [f"v{n}" for n in range(10_001)]
