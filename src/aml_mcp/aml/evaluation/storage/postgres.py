"""Baselines in the database replicas share: every replica reads and saves the same history."""

from __future__ import annotations

import json
import secrets
from typing import Any

from aml_mcp.aml.evaluation.storage import (
    COLUMNS,
    Baseline,
    figures_text,
    refuse_unstorable,
)
from aml_mcp.principal import Principal
from aml_mcp.store.locks import LockClass
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.text import storable

MIGRATION = Migration(
    "aml_eval",
    [
        """
        CREATE TABLE aml_eval_baselines (
            seq          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            baseline_id  TEXT NOT NULL UNIQUE,
            tenant       TEXT NOT NULL,
            saved_at_ms  BIGINT NOT NULL,
            issuer       BYTEA NOT NULL,
            subject      BYTEA NOT NULL,
            client_id    BYTEA NOT NULL,
            digest       TEXT NOT NULL,
            figures      TEXT NOT NULL
        );
        CREATE INDEX aml_eval_baselines_tenant ON aml_eval_baselines (tenant, seq);
        """
    ],
)
"""The same table as on SQLite. Who saved it is `BYTEA` (UTF-8, surrogates escaped), as the task
store's owner columns, because a token's claims may hold characters `TEXT` cannot (U+0000)."""


def _owner_bytes(value: str) -> bytes:
    """A claim as bytes, surrogates kept, as the task store keeps owners."""
    return value.encode("utf-8", "surrogatepass")


def _baseline(row: tuple[Any, ...]) -> Baseline:
    subject = bytes(row[2]).decode("utf-8", "surrogatepass")
    return Baseline(str(row[0]), int(row[1]), subject, str(row[3]), json.loads(row[4]))


class PostgresBaselines:
    """Baselines of every tenant on the shared database; every statement filters on the tenant.

    `save` holds a transaction-scoped advisory lock on the tenant (`LockClass.BASELINE`), so two
    replicas saving the same figures at once still add one row (the second finds the first's
    digest)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def latest(self, tenant: str) -> Baseline | None:
        if not storable(tenant):
            return None  # no stored tenant can be it: `save` refuses such a tenant
        rows = await self._database.execute(
            f"SELECT {COLUMNS} FROM aml_eval_baselines WHERE tenant = %s "  # noqa: S608
            "ORDER BY seq DESC LIMIT 1",
            (tenant,),
        )
        return _baseline(rows[0]) if rows else None

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline:
        refuse_unstorable(principal, digest)
        tenant = principal.tenant
        new_id = secrets.token_urlsafe(12)
        encoded = figures_text(figures)
        async with self._database.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LockClass.BASELINE, tenant))
            cursor = await conn.execute(
                f"SELECT {COLUMNS} FROM aml_eval_baselines WHERE tenant = %s "  # noqa: S608
                "ORDER BY seq DESC LIMIT 1",
                (tenant,),
            )
            row = await cursor.fetchone()
            if row is not None and row[3] == digest:
                return _baseline(row)
            cursor = await conn.execute(
                "INSERT INTO aml_eval_baselines (baseline_id, tenant, saved_at_ms, issuer, subject,"
                " client_id, digest, figures) VALUES (%s, %s,"
                " (extract(epoch FROM clock_timestamp()) * 1000)::bigint, %s, %s, %s, %s, %s)"
                " RETURNING saved_at_ms",
                (
                    new_id,
                    tenant,
                    _owner_bytes(principal.issuer),
                    _owner_bytes(principal.subject),
                    _owner_bytes(principal.client_id),
                    digest,
                    encoded,
                ),
            )
            saved = await cursor.fetchone()
        assert saved is not None
        return Baseline(new_id, int(saved[0]), principal.subject, digest, json.loads(encoded))
