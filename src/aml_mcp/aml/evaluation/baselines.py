"""Stored evaluation baselines, per tenant, in the server's database (component `aml_eval`).

Why a history rather than one row per tenant: a baseline is what later runs are measured
against, and knowing which run set it (and when) matters when a figure moves.

Why saving is a no-op for an identical result: `run_full_eval` is re-run from the start after a
crash (it is declared idempotent), and a crash can fall between saving the baseline and
recording the task's result. Saving a result whose *digest* (dataset fingerprint + figures)
equals the newest baseline's adds no row and returns that baseline, so a re-run changes nothing
more. (Its report then compares with the baseline the first attempt saved: deltas of zero.)
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import time
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.principal import Principal
from aml_mcp.store.postgres import PostgresDatabase, storable
from aml_mcp.store.sqlite import Migration, SqliteDatabase

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


POSTGRES_MIGRATION = Migration(
    COMPONENT,
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
"""The same table on PostgreSQL. Who saved it is `BYTEA` (UTF-8, surrogates escaped), as the task
store's owner columns, because a token's claims may hold characters `TEXT` cannot (U+0000)."""

_BASELINE_LOCK = 0x616D6C65
"""First key of the advisory lock that makes a tenant's read-then-insert one step on PostgreSQL."""


@dataclass(frozen=True, slots=True)
class Baseline:
    baseline_id: str
    saved_at_ms: int
    saved_by: str
    """The subject who saved it (within the same tenant; never another tenant's)."""
    digest: str
    figures: dict[str, Any]


def _baseline(row: sqlite3.Row | tuple[Any, ...]) -> Baseline:
    return Baseline(str(row[0]), int(row[1]), str(row[2]), str(row[3]), json.loads(row[4]))


_COLUMNS = "baseline_id, saved_at_ms, subject, digest, figures"


class UnstorableBaseline(ValueError):
    """A baseline no store keeps as written, refused before anything is sent (on both backends):
    a tenant or digest holding U+0000 or an unpaired surrogate, or who saved it holding an
    unpaired surrogate."""


def refuse_unstorable(principal: Principal, digest: str) -> None:
    """Raise `UnstorableBaseline` unless both stores keep this save as written: the tenant and
    digest are `TEXT` on PostgreSQL (no U+0000), who saved it is bytes there; no driver sends an
    unpaired surrogate. Checked before anything is sent, so the two stores answer alike."""
    if not storable(principal.tenant) or not storable(digest):
        raise UnstorableBaseline(
            "a tenant or digest holding U+0000 or an unpaired surrogate cannot have baselines"
        )
    try:
        for value in (principal.issuer, principal.subject, principal.client_id):
            value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableBaseline("a principal holding an unpaired surrogate cannot save a baseline") from None


class Baselines(Protocol):
    """What the evaluation needs: a tenant's newest baseline, and saving a new one."""

    async def latest(self, tenant: str) -> Baseline | None: ...

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline: ...


class BaselineStore:
    """Baselines of every tenant; every statement filters on the tenant it is given."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._database = database

    async def latest(self, tenant: str) -> Baseline | None:
        """The newest baseline of `tenant` (what a run compares with), if any."""
        if not storable(tenant):
            return None  # no stored tenant can be it: `save` refuses such a tenant

        def read(conn: sqlite3.Connection) -> Baseline | None:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM aml_eval_baselines WHERE tenant = ? "  # noqa: S608
                "ORDER BY seq DESC LIMIT 1",
                (tenant,),
            ).fetchone()
            return None if row is None else _baseline(row)

        return await self._database.read(read)

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline:
        """Make `figures` the tenant's newest baseline; a no-op returning it if it already is."""
        refuse_unstorable(principal, digest)
        tenant = principal.tenant
        now = int(time.time() * 1000)
        new_id = secrets.token_urlsafe(12)
        encoded = json.dumps(figures, sort_keys=True, separators=(",", ":"))

        def write(conn: sqlite3.Connection) -> Baseline:
            row = conn.execute(
                f"SELECT {_COLUMNS} FROM aml_eval_baselines WHERE tenant = ? "  # noqa: S608
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


def _owner_bytes(value: str) -> bytes:
    """A claim as bytes, surrogates kept, as the task store keeps owners."""
    return value.encode("utf-8", "surrogatepass")


def _pg_baseline(row: tuple[Any, ...]) -> Baseline:
    subject = bytes(row[2]).decode("utf-8", "surrogatepass")
    return Baseline(str(row[0]), int(row[1]), subject, str(row[3]), json.loads(row[4]))


_PG_COLUMNS = "baseline_id, saved_at_ms, subject, digest, figures"


class PostgresBaselineStore:
    """`BaselineStore` on the shared database: every replica reads and saves the same history.

    `save` holds a transaction-scoped advisory lock on the tenant, so two replicas saving the same
    figures at once still add one row (the second finds the first's digest)."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._database = database

    async def latest(self, tenant: str) -> Baseline | None:
        if not storable(tenant):
            return None  # no stored tenant can be it: `save` refuses such a tenant
        rows = await self._database.execute(
            f"SELECT {_PG_COLUMNS} FROM aml_eval_baselines WHERE tenant = %s "  # noqa: S608
            "ORDER BY seq DESC LIMIT 1",
            (tenant,),
        )
        return _pg_baseline(rows[0]) if rows else None

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline:
        refuse_unstorable(principal, digest)
        tenant = principal.tenant
        new_id = secrets.token_urlsafe(12)
        encoded = json.dumps(figures, sort_keys=True, separators=(",", ":"))
        async with self._database.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_BASELINE_LOCK, tenant))
            cursor = await conn.execute(
                f"SELECT {_PG_COLUMNS} FROM aml_eval_baselines WHERE tenant = %s "  # noqa: S608
                "ORDER BY seq DESC LIMIT 1",
                (tenant,),
            )
            row = await cursor.fetchone()
            if row is not None and row[3] == digest:
                return _pg_baseline(row)
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
