"""Secrets in the `shared_secrets` table of the database replicas share.

Synchronous on purpose: the secrets are read while the app is built, before any event loop runs
the async pool, and a missing database must stop the start-up rather than leave a server that
cannot open what its siblings sealed. Each read opens a `SyncPostgres` of one connection for as
long as it takes (a few reads at start-up do not justify a pool held for the process's life).

Reading a secret that exists takes no lock. Creating one applies `MIGRATION` (under the migration
lock, as every table is created) and inserts under `AdvisoryLock.SECRETS`, so replicas starting
together end up with one value; a key of its own, so creating a secret never waits for an
unrelated lock holder (it once shared its key with the demo corpus's first load).

Protection: the table is readable only by the role that owns it (`REVOKE ALL ... FROM PUBLIC`);
values are never logged. Give the app its own database role and no one else `SELECT` on it.
"""

from __future__ import annotations

import secrets
from typing import Any

import psycopg

from aml_mcp.shared_secrets.storage import checked_name
from aml_mcp.store.locks import AdvisoryLock
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.postgres_sync import SyncPostgres

APPLICATION_NAME = "aml-mcp-secrets"
"""The connection's `application_name`, so an operator can tell it apart in `pg_stat_activity`."""

MIGRATION = Migration(
    "shared_secrets",
    [
        # IF NOT EXISTS: a deployment of an earlier release created the table without a migration.
        """
        CREATE TABLE IF NOT EXISTS shared_secrets (
            name TEXT PRIMARY KEY,
            value BYTEA NOT NULL,
            created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
        );
        REVOKE ALL ON shared_secrets FROM PUBLIC;
        """
    ],
)


class PostgresSecrets:
    """Secrets in the `shared_secrets` table of `database` (its schema, when it names one)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        name = checked_name(name)
        with SyncPostgres(self._database, name=APPLICATION_NAME, max_size=1) as pool:
            with pool.connection() as conn:
                value = _fetch(conn, name)
            if value is None:
                pool.apply(MIGRATION)
                with pool.transaction() as conn:
                    conn.execute("SELECT pg_advisory_xact_lock(%s)", (AdvisoryLock.SECRETS,))
                    conn.execute(
                        "INSERT INTO shared_secrets (name, value) VALUES (%s, %s)"
                        " ON CONFLICT (name) DO NOTHING",
                        (name, secrets.token_bytes(nbytes)),
                    )
                    value = _fetch(conn, name)
        assert value is not None
        if len(value) < nbytes:
            raise ValueError(f"shared secret {name!r} is shorter than {nbytes} bytes")
        return value


def _fetch(conn: psycopg.Connection[Any], name: str) -> bytes | None:
    """The stored value, or `None` when the secret (or its table) does not exist yet."""
    exists = conn.execute("SELECT to_regclass('shared_secrets') IS NOT NULL").fetchone()
    if exists is None or not exists[0]:
        return None
    row = conn.execute("SELECT value FROM shared_secrets WHERE name = %s", (name,)).fetchone()
    return bytes(row[0]) if row is not None else None
