"""The audit trail: one structured event per security decision, kept in the store and as JSON lines.

Every allow and every deny the auth gate makes is recorded (and the Tasks service records its own
events through the same `AuditLog.record`). An event carries principal fields, the method and its
target, the decision and a short machine-readable reason — never a token, never tool arguments.

Recording must not slow the request path: the request only queues the (immutable) event; a flusher
thread formats batches and hands them to the sinks — one multi-row insert joining the database's
next group commit (no fsync waited for), one append to the JSON-lines file. `AuditLog.record`
never raises: a failing sink is logged, and the request goes on.
"""

from __future__ import annotations

import collections
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Protocol

from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase

logger = logging.getLogger(__name__)

AUDIT_COMPONENT = "audit"
AUDIT_FILE_NAME = "audit.jsonl"
TASK_ID_PREFIX = 8
"""A task id is a handle to someone's work: the trail keeps enough of it to correlate, too little to use."""


def task_reference(task_id: object) -> str | None:
    """The part of a client-sent task id that may be written to the audit trail."""
    return task_id[:TASK_ID_PREFIX] if isinstance(task_id, str) else None


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
        return {
            "time": datetime.fromtimestamp(self.time, UTC).isoformat(timespec="milliseconds"),
            # (formatted by the sinks' own threads, not on the request path)
            "issuer": _clip(self.issuer),
            "subject": _clip(self.subject),
            "tenant": _clip(self.tenant),
            "client_id": _clip(self.client_id),
            "token_id": _clip(self.token_id),
            "method": _clip(self.method),
            "target": _clip(self.target),
            "decision": self.decision.value,
            "reason": _clip(self.reason),
            "detail": dict(self.detail) if self.detail else None,
        }


def _json_line(event: AuditEvent) -> str:
    return json.dumps(event.as_record(), separators=(",", ":"), ensure_ascii=False) + "\n"


def _clip(value: str | None) -> str | None:
    if value is not None and len(value) > _MAX_FIELD:
        return value[:_MAX_FIELD] + "…"
    return value


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
    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        """Take a batch of events (on the audit flusher thread). May raise; the log carries on."""


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


class JsonLinesSink:
    """One JSON object per line appended to a file (kept open; flushed per batch; no fsync).

    The file is for shipping to a log pipeline; the store is the copy `aml-mcp audit tail` reads.
    Rotation is left to the operator's tooling (copytruncate-style rotation works: appends follow).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write("".join(_json_line(event) for event in events))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class LoggerSink:
    """The JSON line on the `aml_mcp.audit` logger, for deployments that collect process logs."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("aml_mcp.audit")

    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        for event in events:
            self.log.info(_json_line(event).rstrip("\n"))


class AuditLog:
    """Where security decisions are recorded. Built once by the composition root and passed in.

    `record` only appends the (immutable) event to a queue — no formatting, no I/O, no thread
    wake-up — so auditing every request costs the request path well under a microsecond. A flusher
    thread hands what has queued to every sink every `flush_seconds` (sooner when `batch_size` events
    are waiting): the store gets one multi-row insert per batch, the file one write. The price is
    that an event reaches the store up to `flush_seconds` later; `close` flushes what is left.
    """

    def __init__(
        self, sinks: Iterable[AuditSink], *, flush_seconds: float = 0.1, batch_size: int = 512
    ) -> None:
        self.sinks = list(sinks)
        self.flush_seconds = flush_seconds
        self.batch_size = batch_size
        self._queue: collections.deque[AuditEvent] = collections.deque()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False

    def record(self, event: AuditEvent) -> None:
        """Queue `event` for every sink; never raises (a broken sink must not turn a deny into a 500)."""
        self._queue.append(event)
        if self._thread is None or self._closed:
            self._start_or_flush()
        elif len(self._queue) >= self.batch_size:
            self._wake.set()

    def _start_or_flush(self) -> None:
        if self._closed:
            self.flush()  # after close: write through, so late events are not lost
            return
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="audit-flusher", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.wait(self.flush_seconds)
            self._wake.clear()
            self.flush()

    def flush(self) -> None:
        """Hand every queued event to the sinks now."""
        with self._lock:
            batch: list[AuditEvent] = []
            while self._queue:
                batch.append(self._queue.popleft())
            if not batch:
                return
            for sink in self.sinks:
                try:
                    sink.write_batch(batch)
                except Exception:
                    logger.exception("audit sink %s failed on %d events", type(sink).__name__, len(batch))

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
        """Flush, stop the flusher thread and close the sinks (later events are written through)."""
        self._closed = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10)
        self.flush()
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
