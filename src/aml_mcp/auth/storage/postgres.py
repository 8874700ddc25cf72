"""Revocations on PostgreSQL, for replicas sharing one database.

Same table and behaviour as the SQLite store (`sqlite.py`). Adding or lifting sends `NOTIFY` on the
deployment's revocation channel inside the same transaction, so the notification is delivered
only once the change is committed (and visible): every process's event bus listener then
re-reads the list at once. The periodic fingerprint poll stays the bound when a notification is
lost (listener reconnecting).
"""

from __future__ import annotations

from aml_mcp.auth.storage import Fingerprint, Revocation, findable, refuse_invalid
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase

CHANNEL = "aml_revocations"
"""The base name of the revocation channel (`PostgresDatabase.channel` makes it per schema)."""

MIGRATION = Migration(
    "auth_revocations",
    [
        """
        CREATE TABLE auth_revocations (
            seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            kind TEXT NOT NULL CHECK (kind IN ('jti', 'subject')),
            issuer TEXT NOT NULL,
            value TEXT NOT NULL,
            revoked_at TEXT NOT NULL DEFAULT
                to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
            note TEXT,
            UNIQUE (kind, issuer, value)
        );
        """,
        # A revocation that only matters while its token could still be accepted (epoch seconds).
        "ALTER TABLE auth_revocations ADD COLUMN expires_at DOUBLE PRECISION;",
    ],
)


class PostgresRevocationStore:
    """Revocations in the `auth_revocations` table of the shared database; apply `MIGRATION` first."""

    def __init__(self, database: PostgresDatabase) -> None:
        self.database = database
        self.channel = database.channel(CHANNEL)

    async def fingerprint(self) -> Fingerprint:
        rows = await self.database.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM auth_revocations")
        return int(rows[0][0]), int(rows[0][1])

    async def entries(self) -> list[Revocation]:
        rows = await self.database.execute(
            "SELECT kind, issuer, value, revoked_at, note FROM auth_revocations ORDER BY seq"
        )
        return [Revocation(*row) for row in rows]

    async def add(
        self, kind: str, issuer: str, value: str, note: str | None, expires_at: float | None = None
    ) -> None:
        refuse_invalid(kind, issuer, value, note)
        async with self.database.transaction() as conn:
            await conn.execute(
                "DELETE FROM auth_revocations WHERE expires_at <= extract(epoch FROM clock_timestamp())"
            )
            cursor = await conn.execute(
                "INSERT INTO auth_revocations (kind, issuer, value, note, expires_at)"
                " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (kind, issuer, value) DO NOTHING",
                (kind, issuer, value, note, expires_at),
            )
            if cursor.rowcount:
                await conn.execute("SELECT pg_notify(%s, '')", (self.channel,))

    async def lift(self, kind: str, issuer: str, value: str) -> bool:
        if not findable(kind, issuer, value):
            return False
        async with self.database.transaction() as conn:
            cursor = await conn.execute(
                "DELETE FROM auth_revocations WHERE kind = %s AND issuer = %s AND value = %s",
                (kind, issuer, value),
            )
            removed = cursor.rowcount > 0
            if removed:
                await conn.execute("SELECT pg_notify(%s, '')", (self.channel,))
        return removed
