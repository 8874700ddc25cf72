"""The audit trail in the data directory's SQLite file: its schema, the sink that fills it and the
queries the lab and `aml-mcp audit tail` run."""

from __future__ import annotations

import asyncio
import functools
import logging
import sqlite3
from collections.abc import Sequence
from typing import Any

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
from aml_mcp.store.migrations import Migration
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.store.text import storable

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

MIGRATION = Migration(AUDIT_COMPONENT, AUDIT_MIGRATIONS)


class SqliteAuditTable:
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


def _insert(prepared: Sequence[Prepared], conn: sqlite3.Connection) -> int:
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

    return [event_of(row) for row in reversed(database.read_now(query))]


async def bank_events(database: SqliteDatabase, query: BankQuery) -> list[dict[str, Any]]:
    """`AuditReader.bank_events` on the SQLite file."""
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

    return [event_of(row) for row in reversed(await database.read(select))]


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

        return [event_of(row) for row in await self.database.read(select)]
