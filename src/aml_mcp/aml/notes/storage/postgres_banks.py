"""The PostgreSQL notes store's registry of banks: the pool, each bank's integer id (its partition's
name) and the generation this replica last read, shared by the store, its bank views and the
identifier directory (`postgres.py`).

Why the generation is remembered: a search first reads its words' document frequencies, which
only choose the words; taking a generation read within `TRUSTED_FOR` as current saves that round
trip, and the ranking statement answers the generation of the rows it read, so a ranking is always
checked against its own statistics (and this replica's own writes forget the remembered one).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg import sql
from psycopg_pool import PoolTimeout

from aml_mcp.aml.notes.model import NotesUnavailableError
from aml_mcp.aml.notes.storage.postgres_bm25 import partition
from aml_mcp.store.locks import LockClass
from aml_mcp.store.postgres import storage_fault
from aml_mcp.store.postgres_sync import SyncPostgres

TRUSTED_FOR = 1.0
"""Seconds for which a replica takes a bank's generation it read as current for the document
frequencies of a search's words."""


class PostgresBanks:
    """The pool and the banks' integer ids: what the store, its bank views and the identifier
    directory share."""

    def __init__(self, pool: SyncPostgres) -> None:
        self.pool = pool
        self.open = False
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}
        self._seen: dict[int, tuple[int, float]] = {}

    def saw(self, tenant_id: int, generation: int) -> None:
        """Note that the bank was at `generation` a moment ago (a statement read it)."""
        with self._lock:
            self._seen[tenant_id] = (generation, time.monotonic())

    def lately(self, tenant_id: int) -> int | None:
        """The bank's generation if this replica read it within `TRUSTED_FOR`, else None; a write
        of this replica forgets it at once."""
        with self._lock:
            seen = self._seen.get(tenant_id)
        return seen[0] if seen is not None and time.monotonic() - seen[1] <= TRUSTED_FOR else None

    def forget(self, tenant_id: int) -> None:
        with self._lock:
            self._seen.pop(tenant_id, None)

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit); storage faults become `NotesUnavailableError`."""
        if not self.open:
            raise RuntimeError("the notes store is not open")
        try:
            with self.pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            cause = storage_fault(exc)
            if cause is None:
                raise
            raise NotesUnavailableError(cause) from exc

    def tenant_id(self, conn: psycopg.Connection[Any], tenant: str) -> int | None:
        """The bank's integer id (remembered: ids never change), or None before its first write."""
        known = self.known(tenant)
        if known is not None:
            return known
        row = conn.execute("SELECT tenant_id FROM aml_note_tenants WHERE name = %s", (tenant,)).fetchone()
        return None if row is None else self.remember(tenant, int(row[0]))

    def known(self, tenant: str) -> int | None:
        with self._lock:
            return self._ids.get(tenant)

    def remember(self, tenant: str, tenant_id: int) -> int:
        with self._lock:
            self._ids[tenant] = tenant_id
        return tenant_id

    def state(self, conn: psycopg.Connection[Any], tenant: str) -> tuple[int, int] | None:
        """(tenant id, generation) now, or None before the bank's first write."""
        row = conn.execute(
            "SELECT tenant_id, generation FROM aml_note_tenants WHERE name = %s", (tenant,)
        ).fetchone()
        if row is None:
            return None
        self.saw(int(row[0]), int(row[1]))
        return int(row[0]), int(row[1])

    @staticmethod
    def writing(conn: psycopg.Connection[Any], tenant: str, *, create: bool) -> int | None:
        """Inside a transaction: take the bank's write lock; its id (partition made if `create`)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LockClass.NOTES_TENANT, tenant))
        row = conn.execute("SELECT tenant_id FROM aml_note_tenants WHERE name = %s", (tenant,)).fetchone()
        if row is not None:
            return int(row[0])
        if not create:
            return None
        created = conn.execute(
            "INSERT INTO aml_note_tenants (name) VALUES (%s) RETURNING tenant_id", (tenant,)
        ).fetchone()
        assert created is not None
        tenant_id = int(created[0])
        conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF aml_notes FOR VALUES IN ({})").format(
                sql.Identifier(partition(tenant_id)), sql.Literal(tenant_id)
            )
        )
        return tenant_id
