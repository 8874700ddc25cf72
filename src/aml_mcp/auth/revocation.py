"""Revocation: deny by token id (`jti`) or by subject (issuer + subject), checked on every request.

The list lives in the store, so it survives restarts and is shared by every process on the same
data directory (`aml-mcp revoke` writes it while the server runs). Each process keeps the whole
list in memory — a check is two set lookups — and re-reads it when a cheap fingerprint query
(row count and highest sequence number) shows a change, every `refresh_seconds`. Revocations made
through this object take effect in this process at once.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio

from aml_mcp.listeners import Listeners
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase

logger = logging.getLogger(__name__)

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
    """
]
"""`issuer` is '' for a `jti` revoked whatever its issuer."""

ANY_ISSUER = ""


@dataclass(frozen=True, slots=True)
class Revocation:
    kind: str
    issuer: str
    value: str
    revoked_at: str
    note: str | None


class RevocationList:
    def __init__(self, database: SqliteDatabase, *, refresh_seconds: float = 2.0) -> None:
        self.database = database
        self.refresh_seconds = refresh_seconds
        self._token_ids: set[tuple[str, str]] = set()
        self._subjects: set[tuple[str, str]] = set()
        self._fingerprint: tuple[int, int] | None = None
        self._threads = anyio.CapacityLimiter(1)
        """The refresh's own worker thread: a revocation must take effect within `refresh_seconds`
        even while anonymous or slow work occupies every thread of the shared pool."""
        self.changes: Listeners[[]] = Listeners()
        """Told after a refresh found the list changed, so open listen streams re-check at once."""

    def check(self, principal: Principal) -> str | None:
        """The reason `principal`'s credential is revoked (`revoked_token`, `revoked_subject`), or None."""
        if (principal.issuer, principal.subject) in self._subjects:
            return "revoked_subject"
        jti = principal.token_id
        if jti is not None and (
            (principal.issuer, jti) in self._token_ids or (ANY_ISSUER, jti) in self._token_ids
        ):
            return "revoked_token"
        return None

    @staticmethod
    def _fingerprint_of(conn: sqlite3.Connection) -> tuple[int, int]:
        row = conn.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM auth_revocations").fetchone()
        return int(row[0]), int(row[1])

    async def refresh(self) -> None:
        """Re-read the list if it changed since the last read."""
        fingerprint = await self.database.read(self._fingerprint_of, limiter=self._threads)
        if fingerprint == self._fingerprint:
            return

        def load(conn: sqlite3.Connection) -> tuple[tuple[int, int], list[tuple[str, str, str]]]:
            return self._fingerprint_of(conn), conn.execute(
                "SELECT kind, issuer, value FROM auth_revocations"
            ).fetchall()

        fingerprint, rows = await self.database.read(load, limiter=self._threads)
        self._token_ids = {(issuer, value) for kind, issuer, value in rows if kind == "jti"}
        self._subjects = {(issuer, value) for kind, issuer, value in rows if kind == "subject"}
        first_load = self._fingerprint is None
        self._fingerprint = fingerprint
        if not first_load:
            self.changes.fire()

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Load now, then keep re-reading in the background until the context exits."""
        await self.refresh()

        async def loop() -> None:
            while True:
                await anyio.sleep(self.refresh_seconds)
                try:
                    await self.refresh()
                except Exception:
                    logger.exception("reading the revocation list failed; keeping the previous one")

        async with anyio.create_task_group() as group:
            group.start_soon(loop, name="revocation-refresh")
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    async def _add(self, kind: str, issuer: str, value: str, note: str | None) -> None:
        if not value:
            raise ValueError("nothing to revoke: empty value")

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT OR IGNORE INTO auth_revocations (kind, issuer, value, note) VALUES (?, ?, ?, ?)",
                (kind, issuer, value, note),
            )

        await self.database.write(insert)
        (self._token_ids if kind == "jti" else self._subjects).add((issuer, value))

    async def revoke_token(self, jti: str, *, issuer: str | None = None, note: str | None = None) -> None:
        """Deny the token with this `jti` (from `issuer`, or from any issuer)."""
        await self._add("jti", issuer or ANY_ISSUER, jti, note)

    async def revoke_subject(self, issuer: str, subject: str, *, note: str | None = None) -> None:
        """Deny every token of this subject from this issuer, until lifted."""
        if not issuer:
            raise ValueError("revoking a subject needs its issuer")
        await self._add("subject", issuer, subject, note)

    async def lift(self, kind: str, issuer: str | None, value: str) -> bool:
        """Remove a revocation; returns whether there was one."""

        def delete(conn: sqlite3.Connection) -> int:
            return conn.execute(
                "DELETE FROM auth_revocations WHERE kind = ? AND issuer = ? AND value = ?",
                (kind, issuer or ANY_ISSUER, value),
            ).rowcount

        removed = await self.database.write(delete) > 0
        self._fingerprint = None
        await self.refresh()
        return removed

    async def entries(self) -> list[Revocation]:
        def query(conn: sqlite3.Connection) -> list[tuple[str, str, str, str, str | None]]:
            return conn.execute(
                "SELECT kind, issuer, value, revoked_at, note FROM auth_revocations ORDER BY seq"
            ).fetchall()

        return [Revocation(*row) for row in await self.database.read(query)]
