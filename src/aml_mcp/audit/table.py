"""The audit trail's table: its schema, the sink that fills it and the query `aml-mcp audit tail` runs."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.audit.events import AuditEvent, dumps, fallback_record
from aml_mcp.store.postgres import storable
from aml_mcp.store.sqlite import SqliteDatabase

logger = logging.getLogger(__name__)

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
    """Rows in the shared database: one write per batch, in the database's next group commit.

    The batch is one `executemany` inside its own savepoint. If that fails, the savepoint is rolled
    back and the rows go in one by one; a row that still fails is replaced by a placeholder
    (`fallback_record`), so one event's content never costs its neighbours their rows. If even
    the placeholder cannot be inserted, the table itself is unwritable (disk full, read-only,
    missing table): the write fails as a whole and the caller keeps the batch to retry.

    `write_batch` waits until the rows are committed (durably, with the rest of the group), so
    the audit log knows whether the trail was written. It runs on the audit flusher thread, which
    drives the database's `write` on an event loop of its own; the request path never waits.
    """

    def __init__(self, database: SqliteDatabase, *, timeout_seconds: float = 120.0) -> None:
        self.database = database
        self.timeout_seconds = timeout_seconds
        """Longest wait for the commit (the writer itself gives up on a lock after 30 s)."""
        self._loop: asyncio.AbstractEventLoop | None = None

    def write_batch(self, events: Sequence[AuditEvent]) -> int:
        """Insert the batch; returns how many events were stored as placeholders. Raises if none could be."""
        prepared = [prepare_row(event) for event in events]
        if not prepared:
            return 0
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        insert = functools.partial(_insert, prepared)
        return self._loop.run_until_complete(
            asyncio.wait_for(self.database.write(insert), self.timeout_seconds)
        )

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None


_INSERT = (
    "INSERT INTO audit_events (time, issuer, subject, tenant, client_id, token_id, method,"
    " target, decision, reason, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_Row = tuple[Any, ...]
_Prepared = tuple[AuditEvent, _Row | None, BaseException | None]


def prepare_row(event: AuditEvent) -> _Prepared:
    """The event's row, or the error that formatting it raised (its placeholder is made on demand)."""
    try:
        return event, row_of(event.as_record()), None
    except Exception as error:
        return event, None, error


def _insert(prepared: Sequence[_Prepared], conn: sqlite3.Connection) -> int:
    """Runs on the writer thread, inside the batch's transaction. Returns the placeholders used."""
    rows = [row for _, row, _ in prepared if row is not None]
    if len(rows) == len(prepared):
        conn.execute("SAVEPOINT audit_batch")
        try:
            conn.executemany(_INSERT, rows)
        except Exception:  # some row is bad: find it below, row by row
            _still_in_transaction(conn)
            conn.execute("ROLLBACK TO SAVEPOINT audit_batch")
            conn.execute("RELEASE SAVEPOINT audit_batch")
        else:
            conn.execute("RELEASE SAVEPOINT audit_batch")
            return 0
    placeholders = 0
    for event, row, error in prepared:
        if row is not None:
            try:
                conn.execute(_INSERT, row)
                continue
            except Exception as failure:
                _still_in_transaction(conn)
                error = failure
        # If even this fails, the table is unwritable: let it raise, the batch is kept and retried.
        conn.execute(_INSERT, row_of(fallback_record(event, error or ValueError("unformattable"))))
        placeholders += 1
    if placeholders:
        logger.error("audit: %d event(s) could not be stored and were replaced by placeholders", placeholders)
    return placeholders


def _still_in_transaction(conn: sqlite3.Connection) -> None:
    """After a failed statement: if SQLite rolled the whole transaction back (disk full, I/O error),
    nothing more may be written in this job — fail it, so the batch is retried as a whole."""
    if not conn.in_transaction:
        raise sqlite3.OperationalError("the audit batch's transaction was rolled back by SQLite")


def _kept(value: Any) -> Any:
    """A column value as both stores keep it: U+0000, which PostgreSQL `TEXT` cannot hold, as the
    text `\\x00` (SQLite could keep it raw, but then the two trails would say different things,
    and on PostgreSQL the event would shrink to a placeholder)."""
    return value.replace("\x00", "\\x00") if isinstance(value, str) and "\x00" in value else value


def row_of(record: Mapping[str, Any]) -> _Row:
    return tuple(_kept(value) for value in _columns_of(record))


def _columns_of(record: Mapping[str, Any]) -> _Row:
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
        dumps(record["detail"]) if record["detail"] else None,
    )


COLUMNS = (
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
            f"SELECT {', '.join(COLUMNS)} FROM audit_events ORDER BY seq DESC LIMIT ?",  # noqa: S608
            (limit,),
        ).fetchall()

    rows = database.read_now(query)
    events = []
    for row in reversed(rows):
        event = dict(zip(COLUMNS, row, strict=True))
        if event["detail"]:
            event["detail"] = json.loads(event["detail"])
        events.append(event)
    return events


@dataclass(frozen=True, slots=True, kw_only=True)
class BankQuery:
    """Which events of the trail the lab's audit view shows one caller (see `bank_events`)."""

    tenant: str
    after: int = 0
    limit: int = 100
    decision: str | None = None
    subject: str | None = None
    method: str | None = None
    except_method: str | None = None


def matches_nothing(query: BankQuery) -> bool:
    """Whether the query asks for a tenant or an equality no stored event can have (U+0000 or an
    unpaired surrogate: no store keeps either raw): both readers then answer no events, without
    asking the database, which would fail on the value (PostgreSQL) or could not even send it."""
    return not storable(query.tenant) or not all(storable(value) for _, value in equality_filters(query))


async def bank_events(database: SqliteDatabase, query: BankQuery) -> list[dict[str, Any]]:
    """One bank's events with `seq > after`, oldest first, at most `limit` (the newest when more match).

    An event is the bank's when its verified tenant is `tenant`; an event with no tenant (a refusal
    before any credential was verified) is nobody's bank's, so no bank's view shows it.
    """
    if matches_nothing(query):
        return []
    params: list[Any] = [query.tenant]
    where = ["tenant = ?", "seq > ?"]
    params.append(query.after)
    for column, value in equality_filters(query):
        where.append(f"{column} = ?")
        params.append(value)
    if query.except_method is not None and storable(query.except_method):  # else no event has it
        where.append("method IS NOT ?")
        params.append(query.except_method)
    sql = (
        f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE {' AND '.join(where)}"  # noqa: S608
        " ORDER BY seq DESC LIMIT ?"
    )
    params.append(query.limit)

    def select(conn: sqlite3.Connection) -> Sequence[tuple[Any, ...]]:
        return conn.execute(sql, params).fetchall()

    events = []
    for row in reversed(await database.read(select)):
        event = dict(zip(COLUMNS, row, strict=True))
        if event["detail"]:
            event["detail"] = json.loads(event["detail"])
        events.append(event)
    return events


def equality_filters(query: BankQuery) -> list[tuple[str, str]]:
    """The equality filters a query sets: (column, value)."""
    wanted = (("decision", query.decision), ("subject", query.subject), ("method", query.method))
    return [(column, value) for column, value in wanted if value is not None]


REQUEST_EVENTS = 16
"""Most records one request makes (the gate's, a handler's): a bound, never reached in practice."""


class AuditReader(Protocol):
    """The queries the lab runs on the trail, whichever database holds it."""

    async def recent_events(self, limit: int) -> list[dict[str, Any]]: ...

    async def bank_events(self, query: BankQuery) -> list[dict[str, Any]]: ...

    async def head(self) -> int:
        """The newest event's number (0 for an empty trail): where a later `request_events` starts."""
        ...

    async def request_events(
        self, *, after: int, token_id: str | None, trace_id: str
    ) -> list[dict[str, Any]]:
        """The records of one request sent after `head` was `after`: those made with the token
        `token_id` (verified, or refused with it in `detail.unverified`) or carrying `trace_id`.

        Only for requests the server sent itself with a token and a trace id it chose at random (the
        lab's simulation), so whoever asks learns nothing about anybody else's requests."""
        ...


class SqliteAuditReader:
    """`AuditReader` on the data directory's SQLite file."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database

    async def recent_events(self, limit: int) -> list[dict[str, Any]]:
        return recent_events(self.database, limit)

    async def bank_events(self, query: BankQuery) -> list[dict[str, Any]]:
        return await bank_events(self.database, query)

    async def head(self) -> int:
        def newest(conn: sqlite3.Connection) -> int:
            row = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_events").fetchone()
            return int(row[0])

        return await self.database.read(newest)

    async def request_events(
        self, *, after: int, token_id: str | None, trace_id: str
    ) -> list[dict[str, Any]]:
        if not storable(trace_id) or not storable(token_id or ""):
            return []  # not an id the server chose: no event carries it
        sql = (
            f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE seq > ? AND ("  # noqa: S608
            " json_extract(detail, '$.trace_id') = ?"
            " OR (? IS NOT NULL AND (token_id = ? OR json_extract(detail, '$.unverified.jti') = ?))"
            ") ORDER BY seq LIMIT ?"
        )
        params = (after, trace_id, token_id, token_id, token_id, REQUEST_EVENTS)

        def select(conn: sqlite3.Connection) -> Sequence[tuple[Any, ...]]:
            return conn.execute(sql, params).fetchall()

        return [_decoded(row) for row in await self.database.read(select)]


def _decoded(row: Sequence[Any]) -> dict[str, Any]:
    event = dict(zip(COLUMNS, row, strict=True))
    if event["detail"]:
        event["detail"] = json.loads(event["detail"])
    return event
