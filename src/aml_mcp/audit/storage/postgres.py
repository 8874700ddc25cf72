"""The audit trail's table on PostgreSQL: the same columns, a sink that fills it, the lab's queries.

Replicas sharing one database write one trail, so the lab's audit view (and an auditor) sees the
decisions of every process. `detail` stays the record's compact ASCII JSON in a `TEXT` column
rather than `JSONB`: JSONB refuses `\\u0000`, and a token (even an unverified one) may carry one.
The JSON functions decode values too and fail the whole query on such a row, so the values the
lab's query selects by (`detail.unverified.jti`, `detail.trace_id`, whether `detail.unverified`
is there) are extracted by the sink into three more columns when the row is written; the query
never parses JSON and one hostile row cannot fail it.

The sink runs on the audit flusher thread, outside any event loop, so it holds one plain
(synchronous) connection of its own, opened on its first batch and again on the batch after a
failure; the pool belongs to the app's loop and is used by the readers. (Not a `SyncPostgres`: a
pool would add its own threads and connections for one writer, make the flusher wait for a free
connection rather than fail at the connect timeout, and could not be opened again after an open
that failed, where this sink simply tries the next batch.)

A connection that the server dropped while it sat idle (a reset, a failover, a pooler recycling
sessions) is no outage: a batch that fails on a storage fault is written again at once on a fresh
connection, and only when that fails too does the batch go back to the log, which then declares the
trail unavailable and fails closed. A batch is one transaction, so the first attempt either wrote
nothing or (if the connection died during the commit itself) everything; in that rare case the trail
holds the batch twice, never loses it — the log's own retry after a failure has the same property.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from aml_mcp.audit.events import AuditEvent, fallback_record
from aml_mcp.audit.storage import (
    COLUMNS,
    REQUEST_EVENTS,
    BankQuery,
    Prepared,
    equality_filters,
    event_of,
    matches_nothing,
    prepare_row,
    row_of,
)
from aml_mcp.store.faults import storage_fault
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.text import storable

logger = logging.getLogger(__name__)

MIGRATION = Migration(
    "audit",
    [
        """
        CREATE TABLE audit_events (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
            detail TEXT,
            unverified BOOLEAN NOT NULL DEFAULT false,
            unverified_jti TEXT,
            trace_id TEXT
        );
        CREATE INDEX audit_events_by_subject ON audit_events (issuer, subject, seq);
        CREATE INDEX audit_events_by_tenant ON audit_events (tenant, seq);
        """
    ],
)

_COLUMN_TYPES = (
    *(
        (name, "text")
        for name in (
            *("time", "issuer", "subject", "tenant", "client_id", "token_id"),
            *("method", "target", "decision", "reason", "detail"),
        )
    ),
    ("unverified", "boolean"),
    ("unverified_jti", "text"),
    ("trace_id", "text"),
)
"""The columns a row (`_with_lookups`) fills, in its order, with their types."""
_COLUMNS = ", ".join(name for name, _ in _COLUMN_TYPES)
_INSERT = f"INSERT INTO audit_events ({_COLUMNS}) VALUES ({', '.join(['%s'] * len(_COLUMN_TYPES))})"  # noqa: S608
_INSERT_ALL = (
    f"INSERT INTO audit_events ({_COLUMNS}) SELECT * FROM unnest("  # noqa: S608
    + ", ".join(f"%s::{kind}[]" for _, kind in _COLUMN_TYPES)
    + ")"
)
"""A whole batch in one statement of constant text (one array per column, rows in batch order): one
statement for the rows of a busy 100 ms, parsed and planned once per connection."""


class PostgresAuditTable:
    """Rows in the shared database, one transaction per batch, with the SQLite sink's fallbacks:
    the batch in one savepoint; if that fails, row by row, a row that still fails replaced by its
    placeholder; if even that fails, the table is unwritable and the batch is raised to be retried."""

    def __init__(self, url: str, *, schema: str | None = None, connect_timeout_seconds: int = 5) -> None:
        self._url = url
        self._schema = schema
        self._connect_timeout = connect_timeout_seconds
        self._conn: psycopg.Connection[Any] | None = None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            conn = psycopg.connect(
                self._url,
                autocommit=True,
                connect_timeout=self._connect_timeout,
                application_name="aml-mcp-audit",
            )
            if self._schema is not None:
                conn.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(self._schema)))
            self._conn = conn
        return self._conn

    def write_batch(self, events: Sequence[AuditEvent]) -> int:
        prepared = [prepare_row(event) for event in events]
        if not prepared:
            return 0
        try:
            return self._write(prepared)
        except psycopg.Error as error:
            self.close()
            cause = storage_fault(error)
            if cause is None:
                raise
            logger.warning("audit: the trail's connection failed (%s); writing the batch on a new one", cause)
        try:
            return self._write(prepared)
        except psycopg.Error:
            self.close()  # a fresh connection for the log's retry
            raise

    def _write(self, prepared: Sequence[Prepared]) -> int:
        conn = self._connection()
        if _insert_all(conn, prepared):
            return 0
        with conn.transaction():  # the batch with a bad event in it, still all or nothing
            return _insert_each(conn, prepared)

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def _insert_all(conn: psycopg.Connection[Any], prepared: Sequence[Prepared]) -> bool:
    """The whole batch as one statement, atomic on its own (the connection autocommits): one round
    trip per batch. False when some event is bad (nothing was written): `_insert_each` finds it."""
    rows = [_with_lookups(row) for _, row, _ in prepared if row is not None]
    if len(rows) != len(prepared):
        return False
    try:
        conn.execute(_INSERT_ALL, [list(column) for column in zip(*rows, strict=True)])
    except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError):
        return False
    return True


def _insert_each(conn: psycopg.Connection[Any], prepared: Sequence[Prepared]) -> int:
    """Event by event inside the caller's transaction, a bad one replaced by a placeholder."""
    placeholders = 0
    for event, row, error in prepared:
        if row is not None:
            try:
                with conn.transaction():
                    conn.execute(_INSERT, _with_lookups(row))
                continue
            except (psycopg.DataError, psycopg.IntegrityError, psycopg.ProgrammingError) as failure:
                error = failure
        fallback = row_of(fallback_record(event, error or ValueError("unformattable")))
        conn.execute(_INSERT, _with_lookups(tuple(_without_nul(value) for value in fallback)))
        placeholders += 1
    if placeholders:
        logger.error("audit: %d event(s) could not be stored and were replaced by placeholders", placeholders)
    return placeholders


def _with_lookups(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row plus the columns `bank_events` selects by, taken from its `detail` JSON."""
    detail = json.loads(row[-1]) if row[-1] else {}
    unverified = detail.get("unverified") if isinstance(detail, dict) else None
    jti = unverified.get("jti") if isinstance(unverified, dict) else None
    trace = detail.get("trace_id") if isinstance(detail, dict) else None
    return (
        *row,
        unverified is not None,
        _without_nul(jti) if isinstance(jti, str) else None,
        _without_nul(trace) if isinstance(trace, str) else None,
    )


def _without_nul(value: Any) -> Any:
    """PostgreSQL `TEXT` cannot hold NUL, which the placeholder keeps (it is ASCII): escape it."""
    return value.replace("\x00", "\\x00") if isinstance(value, str) else value


class PostgresAuditReader:
    """The queries on the trail (`recent_events`, `bank_events`), on the shared database."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database

    async def recent_events(self, limit: int) -> list[dict[str, Any]]:
        rows = await self.database.execute(
            f"SELECT {', '.join(COLUMNS)} FROM audit_events ORDER BY seq DESC LIMIT %s",  # noqa: S608
            (limit,),
        )
        return [event_of(row) for row in reversed(rows)]

    async def bank_events(self, query: BankQuery) -> list[dict[str, Any]]:
        """Same selection as `SqliteAuditReader.bank_events` (whose events are whose: `AuditReader`)."""
        if matches_nothing(query):
            return []
        params: list[Any] = [query.tenant]
        where = ["tenant = %s", "seq > %s"]
        params.append(query.after)
        for column, value in equality_filters(query):
            where.append(f"{column} = %s")
            params.append(value)
        if query.except_method is not None and storable(query.except_method):  # else no event has it
            where.append("method IS DISTINCT FROM %s")
            params.append(query.except_method)
        select = (
            f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE {' AND '.join(where)}"  # noqa: S608
            " ORDER BY seq DESC LIMIT %s"
        )
        params.append(query.limit)
        rows = await self.database.execute(select, params)
        return [event_of(row) for row in reversed(rows)]

    async def head(self) -> int:
        rows = await self.database.execute("SELECT COALESCE(MAX(seq), 0) FROM audit_events", ())
        return int(rows[0][0])

    async def request_events(
        self, *, after: int, token_id: str | None, trace_id: str
    ) -> list[dict[str, Any]]:
        """Same selection as `SqliteAuditReader.request_events`."""
        if not storable(trace_id) or not storable(token_id or ""):
            return []  # not an id the server chose: no event carries it
        rows = await self.database.execute(
            f"SELECT {', '.join(COLUMNS)} FROM audit_events WHERE seq > %s AND ("  # noqa: S608
            " trace_id = %s OR (%s::text IS NOT NULL AND (token_id = %s OR unverified_jti = %s))"
            ") ORDER BY seq LIMIT %s",
            (after, trace_id, token_id, token_id, token_id, REQUEST_EVENTS),
        )
        return [event_of(row) for row in rows]
