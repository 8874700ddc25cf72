"""Baselines in the data directory's SQLite database."""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from typing import Any

from aml_mcp.aml.evaluation.storage import (
    COLUMNS,
    Baseline,
    figures_text,
    refuse_unstorable,
)
from aml_mcp.principal import Principal
from aml_mcp.store.migrations import Migration
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.store.text import storable

COMPONENT = "aml_eval"
MIGRATIONS: list[str] = [
    """
    CREATE TABLE aml_eval_baselines (
        seq          INTEGER PRIMARY KEY AUTOINCREMENT,
        baseline_id  TEXT NOT NULL UNIQUE,
        tenant       TEXT NOT NULL,
        saved_at_ms  INTEGER NOT NULL,
        issuer       TEXT NOT NULL,
        subject      TEXT NOT NULL,
        client_id    TEXT NOT NULL,
        digest       TEXT NOT NULL,
        figures      TEXT NOT NULL
    );
    CREATE INDEX aml_eval_baselines_tenant ON aml_eval_baselines (tenant, seq);
    """,
]

MIGRATION = Migration(COMPONENT, MIGRATIONS)


def _baseline(row: sqlite3.Row | tuple[Any, ...]) -> Baseline:
    return Baseline(str(row[0]), int(row[1]), str(row[2]), str(row[3]), json.loads(row[4]))


class SqliteBaselines:
    """Baselines of every tenant; every statement filters on the tenant it is given."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def latest(self, tenant: str) -> Baseline | None:
        if not storable(tenant):
            return None  # no stored tenant can be it: `save` refuses such a tenant

        def read(conn: sqlite3.Connection) -> Baseline | None:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM aml_eval_baselines WHERE tenant = ? "  # noqa: S608
                "ORDER BY seq DESC LIMIT 1",
                (tenant,),
            ).fetchone()
            return None if row is None else _baseline(row)

        return await self._database.read(read)

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline:
        refuse_unstorable(principal, digest)
        tenant = principal.tenant
        now = int(time.time() * 1000)
        new_id = secrets.token_urlsafe(12)
        encoded = figures_text(figures)

        def write(conn: sqlite3.Connection) -> Baseline:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM aml_eval_baselines WHERE tenant = ? "  # noqa: S608
                "ORDER BY seq DESC LIMIT 1",
                (tenant,),
            ).fetchone()
            if row is not None and row[3] == digest:
                return _baseline(row)
            conn.execute(
                "INSERT INTO aml_eval_baselines (baseline_id, tenant, saved_at_ms, issuer, subject,"
                " client_id, digest, figures) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    new_id,
                    tenant,
                    now,
                    principal.issuer,
                    principal.subject,
                    principal.client_id,
                    digest,
                    encoded,
                ),
            )
            return Baseline(new_id, now, principal.subject, digest, json.loads(encoded))

        return await self._database.write(write)
