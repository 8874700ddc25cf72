"""Revocations on the data directory's SQLite file, for every process of one host."""

from __future__ import annotations

import sqlite3
import time

import anyio

from aml_mcp.auth.storage import Fingerprint, Revocation, findable, refuse_invalid
from aml_mcp.store.migrations import Migration
from aml_mcp.store.sqlite import SqliteDatabase

REVOCATION_COMPONENT = "auth"
REVOCATION_MIGRATIONS: list[str] = [
    """
    CREATE TABLE auth_revocations (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL CHECK (kind IN ('jti', 'subject')),
        issuer TEXT NOT NULL,
        value TEXT NOT NULL,
        revoked_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),
        note TEXT,
        UNIQUE (kind, issuer, value)
    );
    """,
    # A revocation that only matters while its token could still be accepted (epoch seconds);
    # NULL: until lifted.
    "ALTER TABLE auth_revocations ADD COLUMN expires_at REAL;",
]
"""`issuer` is '' for a `jti` revoked whatever its issuer."""

MIGRATION = Migration(REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)


class SqliteRevocationStore:
    """Revocations in the `auth_revocations` table of the data directory's SQLite file."""

    def __init__(self, database: SqliteDatabase) -> None:
        self.database = database
        self._threads = anyio.CapacityLimiter(1)
        """Reads get a worker thread of their own: a revocation must take effect within the refresh
        interval even while anonymous or slow work occupies every thread of the shared pool."""

    @staticmethod
    def _fingerprint_of(conn: sqlite3.Connection) -> Fingerprint:
        row = conn.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM auth_revocations").fetchone()
        return int(row[0]), int(row[1])

    async def fingerprint(self) -> Fingerprint:
        return await self.database.read(self._fingerprint_of, limiter=self._threads)

    async def entries(self) -> list[Revocation]:
        def query(conn: sqlite3.Connection) -> list[tuple[str, str, str, str, str | None]]:
            return conn.execute(
                "SELECT kind, issuer, value, revoked_at, note FROM auth_revocations ORDER BY seq"
            ).fetchall()

        return [Revocation(*row) for row in await self.database.read(query, limiter=self._threads)]

    async def add(
        self, kind: str, issuer: str, value: str, note: str | None, expires_at: float | None = None
    ) -> None:
        refuse_invalid(kind, issuer, value, note)

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM auth_revocations WHERE expires_at <= ?", (time.time(),))
            conn.execute(
                "INSERT OR IGNORE INTO auth_revocations (kind, issuer, value, note, expires_at)"
                " VALUES (?, ?, ?, ?, ?)",
                (kind, issuer, value, note, expires_at),
            )

        await self.database.write(insert)

    async def lift(self, kind: str, issuer: str, value: str) -> bool:
        if not findable(kind, issuer, value):
            return False

        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM auth_revocations WHERE kind = ? AND issuer = ? AND value = ?",
                (kind, issuer, value),
            ).rowcount

        return await self.database.write(delete) > 0
