"""The audit trail: one structured event per security decision, kept in the store and as JSON lines.

Every allow and every deny the auth gate makes is recorded (and the Tasks service records its own
events through the same `AuditLog.record`). An event carries principal fields, the method and its
target, the decision and a short machine-readable reason — never a token, never tool arguments.

Recording must not slow the request path: the store row joins the database's next group commit
(`write_soon`, no fsync waited for) and the JSON line is one unbuffered append without fsync.
`AuditLog.record` never raises: a failing sink is logged, and the request goes on.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Protocol

from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase

logger = logging.getLogger(__name__)

AUDIT_COMPONENT = "audit"
AUDIT_FILE_NAME = "audit.jsonl"

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

_MAX_FIELD = 512


class Decision(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One decision. Principal fields are `None` when no credential could be verified."""

    decision: Decision
    reason: str
    """Short, stable, machine-readable: `ok`, `no_token`, `bad_signature`, `wrong_audience`, ..."""
    method: str | None = None
    target: str | None = None
    """What the method acts on: a tool or prompt name, a resource URI, a task id."""
    issuer: str | None = None
    subject: str | None = None
    tenant: str | None = None
    client_id: str | None = None
    token_id: str | None = None
    detail: Mapping[str, Any] | None = None
    """Extra structured facts (e.g. the scopes a 403 asked for). Never a credential."""
    time: float = field(default_factory=time.time)

    @classmethod
    def about(
        cls,
        principal: Principal | None,
        *,
        decision: Decision,
        reason: str,
        method: str | None = None,
        target: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditEvent:
        """An event whose principal fields come from `principal` (or stay empty)."""
        if principal is None:
            return cls(decision=decision, reason=reason, method=method, target=target, detail=detail)
        return cls(
            decision=decision,
            reason=reason,
            method=method,
            target=target,
            issuer=principal.issuer,
            subject=principal.subject,
            tenant=principal.tenant,
            client_id=principal.client_id,
            token_id=principal.token_id,
            detail=detail,
        )

    def as_record(self) -> dict[str, Any]:
        """The JSON-line / row shape: ISO time, every field present, long values clipped."""
        record = asdict(self)
        record["time"] = datetime.fromtimestamp(self.time, UTC).isoformat(timespec="milliseconds")
        record["decision"] = str(self.decision)
        for key, value in record.items():
            if isinstance(value, str) and len(value) > _MAX_FIELD:
                record[key] = value[:_MAX_FIELD] + "…"
        record["detail"] = dict(self.detail) if self.detail else None
        return record


class TaskEventLike(Protocol):
    """The shape of the Tasks service's audit events (kept structural: audit does not import tasks)."""

    @property
    def method(self) -> str: ...
    @property
    def decision(self) -> str: ...
    @property
    def reason(self) -> str: ...
    @property
    def issuer(self) -> str: ...
    @property
    def subject(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def task(self) -> str | None: ...
    @property
    def tool(self) -> str | None: ...


class AuditSink(Protocol):
    def write(self, record: Mapping[str, Any]) -> None: ...


class StoreSink:
    """Rows in the shared database, queued into the next group commit (no fsync on the request path)."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    def write(self, record: Mapping[str, Any]) -> None:
        values = (
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

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO audit_events (time, issuer, subject, tenant, client_id, token_id, method,"
                " target, decision, reason, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )

        self.database.write_soon(insert)


class JsonLinesSink:
    """One JSON object per line appended to a file (opened lazily, kept open, no fsync).

    The file is for shipping to a log pipeline; the store is the copy `aml-mcp audit tail` reads.
    Rotation is left to the operator's tooling (copytruncate-style rotation works: appends follow).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"), ensure_ascii=False) + "\n"
        with self._lock:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8", buffering=1)
            self._file.write(line)

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


class LoggerSink:
    """The JSON line on the `aml_mcp.audit` logger, for deployments that collect process logs."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("aml_mcp.audit")

    def write(self, record: Mapping[str, Any]) -> None:
        self.log.info(json.dumps(record, separators=(",", ":"), ensure_ascii=False))


class AuditLog:
    """Where security decisions are recorded. Built once by the composition root and passed in."""

    def __init__(self, sinks: Iterable[AuditSink]) -> None:
        self.sinks = list(sinks)

    def record(self, event: AuditEvent) -> None:
        """Record `event` in every sink; never raises (a broken sink must not turn a deny into a 500)."""
        record = event.as_record()
        for sink in self.sinks:
            try:
                sink.write(record)
            except Exception:
                logger.exception("audit sink %s failed", type(sink).__name__)

    def record_task(self, event: TaskEventLike) -> None:
        """Adapter for the Tasks service's audit hook (`TaskAudit`): one task decision, same trail."""
        self.record(
            AuditEvent(
                decision=Decision(event.decision),
                reason=event.reason,
                method=event.method,
                target=event.task,
                issuer=event.issuer,
                subject=event.subject,
                tenant=event.tenant,
                client_id=event.client_id,
                detail={"tool": event.tool} if event.tool else None,
            )
        )

    def close(self) -> None:
        for sink in self.sinks:
            close = getattr(sink, "close", None)
            if callable(close):
                close()


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
