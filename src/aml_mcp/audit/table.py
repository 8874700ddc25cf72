"""The audit trail's table: its schema, the sink that fills it and the query `aml-mcp audit tail` runs."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from aml_mcp.audit.events import AuditEvent
from aml_mcp.store.sqlite import SqliteDatabase

AUDIT_COMPONENT = "audit"

AUDIT_MIGRATIONS: list[str] = [
    """
    CREATE TABLE audit_events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        time TEXT NOT NULL,
        issuer TEXT,
        subject TEXT,
        tenant TEXT,
        client_id TEXT,
        token_id TEXT,
        method TEXT,
        target TEXT,
        decision TEXT NOT NULL,
        reason TEXT NOT NULL,
        detail TEXT
    );
    CREATE INDEX audit_events_by_subject ON audit_events (issuer, subject, seq);
    CREATE INDEX audit_events_by_tenant ON audit_events (tenant, seq);
    """
]
"""The `audit` component's schema (append-only list: add a step, never edit one)."""


class StoreSink:
    """Rows in the shared database: one `executemany` per batch, joining the next group commit."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        rows = [_row(event.as_record()) for event in events]
        self.database.write_soon(lambda conn: conn.executemany(_INSERT, rows))


_INSERT = (
    "INSERT INTO audit_events (time, issuer, subject, tenant, client_id, token_id, method,"
    " target, decision, reason, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _row(record: Mapping[str, Any]) -> tuple[Any, ...]:
    return (
        record["time"],
        record["issuer"],
        record["subject"],
        record["tenant"],
        record["client_id"],
        record["token_id"],
        record["method"],
        record["target"],
        record["decision"],
        record["reason"],
        json.dumps(record["detail"], separators=(",", ":")) if record["detail"] else None,
    )


_COLUMNS = (
    "seq",
    "time",
    "issuer",
    "subject",
    "tenant",
    "client_id",
    "token_id",
    "method",
    "target",
    "decision",
    "reason",
    "detail",
)


def recent_events(database: SqliteDatabase, limit: int) -> list[dict[str, Any]]:
    """The newest `limit` events from the store, oldest first (what `aml-mcp audit tail` prints)."""

    def query(conn: sqlite3.Connection) -> Sequence[tuple[Any, ...]]:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit_events'"
        ).fetchone()
        if exists is None:
            return []
        return conn.execute(
            f"SELECT {', '.join(_COLUMNS)} FROM audit_events ORDER BY seq DESC LIMIT ?",  # noqa: S608
            (limit,),
        ).fetchall()

    rows = database.read_now(query)
    events = []
    for row in reversed(rows):
        event = dict(zip(_COLUMNS, row, strict=True))
        if event["detail"]:
            event["detail"] = json.loads(event["detail"])
        events.append(event)
    return events
