"""`TaskStore` on the shared SQLite database (WAL, `synchronous=FULL`, group commit).

Every write goes through `SqliteDatabase.write`, which returns only after the batch holding it
is committed and fsync'd, so a create acknowledged here survives a crash. The SQL stays plain
(one table, conditional updates, `RETURNING`) so a PostgreSQL store can mirror it; triggers are a
second wall behind the conditional updates: a terminal row, a task's identity, owner and expiry
can never be changed by any statement.

SQLite's own failures (disk full, a lock held past the busy timeout, a read-only or damaged file,
an I/O error, a closed database) leave as `StorageUnavailable`, logged once per outage rather
than once per request; constraint violations are bugs and stay what they are.
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from aml_mcp.principal import Owner
from aml_mcp.store.migrations import Migration
from aml_mcp.store.outage import OutageLog
from aml_mcp.store.sqlite import SqliteDatabase, storage_fault
from aml_mcp.store.text import storable
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.storage import (
    ACTIVE,
    COLUMNS,
    Change,
    Dialect,
    LeaseReport,
    QuotaExceeded,
    StorageUnavailable,
    TaskQuota,
    UnstorableTask,
    change_assignments,
    creates_refused,
    findable,
    record_of,
    refuse_unstorable_key,
    task_row,
)

logger = logging.getLogger(__name__)
T = TypeVar("T")

COMPONENT = "tasks"

MIGRATIONS: list[str] = [
    """
    CREATE TABLE tasks (
        task_id TEXT PRIMARY KEY,
        owner_issuer TEXT NOT NULL,
        owner_subject TEXT NOT NULL,
        owner_tenant TEXT NOT NULL,
        owner_client_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        required_scope TEXT,
        arguments TEXT NOT NULL,
        client_capabilities TEXT NOT NULL,
        status TEXT NOT NULL
            CHECK (status IN ('working', 'input_required', 'completed', 'failed', 'cancelled')),
        status_message TEXT,
        input_requests TEXT NOT NULL DEFAULT '{}',
        input_responses TEXT NOT NULL DEFAULT '{}',
        result TEXT,
        error TEXT,
        cancel_requested INTEGER NOT NULL DEFAULT 0,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        ttl_ms INTEGER NOT NULL CHECK (ttl_ms > 0),
        expires_at INTEGER NOT NULL,
        version INTEGER NOT NULL,
        lease_holder TEXT,
        lease_expires_at INTEGER,
        attempts INTEGER NOT NULL DEFAULT 0,
        CHECK ((status = 'completed') = (result IS NOT NULL)),
        CHECK ((status = 'failed') = (error IS NOT NULL))
    );
    CREATE INDEX tasks_by_expiry ON tasks (expires_at);
    CREATE INDEX tasks_by_lease ON tasks (lease_expires_at) WHERE status IN ('working', 'input_required');
    CREATE INDEX tasks_by_holder ON tasks (lease_holder) WHERE status IN ('working', 'input_required');
    CREATE TRIGGER tasks_terminal_is_final BEFORE UPDATE ON tasks
    WHEN OLD.status IN ('completed', 'failed', 'cancelled')
    BEGIN
        SELECT RAISE(ABORT, 'a terminal task never changes');
    END;
    CREATE TRIGGER tasks_identity_is_fixed BEFORE UPDATE ON tasks
    WHEN NEW.task_id IS NOT OLD.task_id
      OR NEW.owner_issuer IS NOT OLD.owner_issuer
      OR NEW.owner_subject IS NOT OLD.owner_subject
      OR NEW.owner_tenant IS NOT OLD.owner_tenant
      OR NEW.owner_client_id IS NOT OLD.owner_client_id
      OR NEW.tool IS NOT OLD.tool
      OR NEW.required_scope IS NOT OLD.required_scope
      OR NEW.created_at IS NOT OLD.created_at
      OR NEW.ttl_ms IS NOT OLD.ttl_ms
      OR NEW.expires_at IS NOT OLD.expires_at
      OR NEW.version < OLD.version
    BEGIN
        SELECT RAISE(ABORT, 'a task''s identity, owner, tool, scope and expiry never change');
    END;
    """,
    # Graceful hand-backs are counted apart from runs, so a deploy is never taken for a crash; the
    # owner index makes the quota count at create one short index range.
    """
    ALTER TABLE tasks ADD COLUMN handovers INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX tasks_active_by_owner ON tasks (owner_tenant, owner_issuer, owner_subject, expires_at)
        WHERE status IN ('working', 'input_required');
    """,
    # The create-rate window counts every task a principal created lately, finished or not: one
    # short index range, read newest first. The subject leads so that the tenant-wide count of
    # unfinished tasks keeps its partial index (this one would match its prefix and scan finished rows).
    """
    CREATE INDEX tasks_created_by_principal ON tasks (owner_subject, owner_tenant, owner_issuer, created_at);
    """,
    # A retried create names the task the first attempt made: the client's idempotency key is kept
    # with the task, unique per owner, and never changes (the trigger is the second wall).
    """
    ALTER TABLE tasks ADD COLUMN idempotency_key TEXT;
    CREATE UNIQUE INDEX tasks_by_idempotency_key
        ON tasks (idempotency_key, owner_issuer, owner_subject, owner_tenant, owner_client_id)
        WHERE idempotency_key IS NOT NULL;
    CREATE TRIGGER tasks_idempotency_key_is_fixed BEFORE UPDATE ON tasks
    WHEN NEW.idempotency_key IS NOT OLD.idempotency_key
    BEGIN
        SELECT RAISE(ABORT, 'a task''s idempotency key never changes');
    END;
    """,
    # A body's structured progress (`_meta["aml-mcp/progress"]`: done, total) is kept with its task,
    # so every replica answers it; compact JSON of two numbers, changed like the status message
    # (only while the task is active: the trigger keeps a terminal row as it is).
    """
    ALTER TABLE tasks ADD COLUMN progress TEXT;
    """,
]

MIGRATION = Migration(COMPONENT, MIGRATIONS)

DIALECT = Dialect(placeholder="?", greatest="MAX", owner=str, message=lambda text: text, flag=int)
"""Owners and status messages as written (SQLite `TEXT` holds U+0000), flags as 0 or 1."""

_OWNED = DIALECT.owned()
_RECENT_CREATES = (
    "SELECT COUNT(*), MIN(created_at) FROM (SELECT created_at FROM tasks"
    " WHERE owner_tenant = ? AND owner_issuer = ? AND owner_subject = ? AND created_at > ?"
    " ORDER BY created_at DESC LIMIT ?)"
)
"""The newest creates of one principal in the window, at most the limit of them: (how many, the
oldest one's `created_at`). Expired rows count too: the sweeper keeps them until they leave it."""


def _record(row: tuple[Any, ...]) -> TaskRecord:
    return record_of(row, owner=Owner(row[1], row[2], row[3], row[4]), status_message=row[10])


_KEYED = DIALECT.keyed()


def _held(conn: sqlite3.Connection, idempotency_key: str, owner: Owner, now_ms: int) -> TaskRecord | None:
    """The live task `owner` created with `idempotency_key`, if any; an expired one still holding
    the key (the sweeper has not reached it) is deleted, so the key names a new task."""
    args = DIALECT.keyed_args(idempotency_key, owner)
    conn.execute(f"DELETE FROM tasks WHERE {_KEYED} AND expires_at <= ?", (*args, now_ms))  # noqa: S608
    row = conn.execute(f"SELECT {COLUMNS} FROM tasks WHERE {_KEYED}", args).fetchone()  # noqa: S608
    return _record(row) if row is not None else None


class SqliteTaskStore:
    """Tasks in the `tasks` table of the shared database; apply `MIGRATION` first."""

    def __init__(self, database: SqliteDatabase) -> None:
        self._db = database
        self._outage = OutageLog(
            logger,
            down="task storage unavailable ({cause}: {error});"
            " callers get a retryable error until it recovers",
            up="task storage available again (after: {cause})",
        )

    def _fault(self, exc: Exception) -> StorageUnavailable | None:
        cause = storage_fault(exc)
        if cause is None:
            return None
        self._outage.failed(cause, exc)
        return StorageUnavailable(cause)

    async def _write(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        def counted(conn: sqlite3.Connection) -> tuple[T, bool]:
            before = conn.total_changes
            result = operation(conn)
            return result, conn.total_changes != before

        try:
            result, wrote = await self._db.write(counted)
        except Exception as exc:
            fault = self._fault(exc)
            if fault is None:
                raise
            raise fault from exc
        if wrote:  # a write that changed nothing commits without touching the disk: no proof of health
            self._outage.recovered()
        return result

    def _read_now(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return self._db.read_now(operation)
        except Exception as exc:
            fault = self._fault(exc)
            if fault is None:
                raise
            raise fault from exc

    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        refuse_unstorable_key(idempotency_key)
        row = (*task_row(task, DIALECT), idempotency_key)
        sql = f"INSERT INTO tasks ({COLUMNS}, idempotency_key) VALUES ({', '.join('?' * len(row))})"  # noqa: S608
        owner = task.owner
        count = (
            "SELECT COUNT(*), COALESCE(SUM(owner_subject = ?), 0) FROM tasks"  # noqa: S608
            f" WHERE owner_tenant = ? AND owner_issuer = ? AND {ACTIVE} AND expires_at > ?"
        )

        def insert(conn: sqlite3.Connection) -> TaskRecord:
            # Looked up, counted and inserted by the one writer, in one transaction: no two creates
            # both see room, nor both miss the task a key already names.
            if idempotency_key is not None:
                held = _held(conn, idempotency_key, owner, task.created_at)
                if held is not None:
                    return held
            if quota is not None:
                tenant, principal = conn.execute(
                    count, (owner.subject, owner.tenant, owner.issuer, task.created_at)
                ).fetchone()
                if principal >= quota.active_per_principal:
                    raise QuotaExceeded("principal", quota.active_per_principal)
                if tenant >= quota.active_per_tenant:
                    raise QuotaExceeded("tenant", quota.active_per_tenant)
                if quota.created_per_principal is not None:
                    made, oldest = conn.execute(
                        _RECENT_CREATES,
                        (
                            owner.tenant,
                            owner.issuer,
                            owner.subject,
                            quota.window_opens_after(task.created_at),
                            quota.created_per_principal,
                        ),
                    ).fetchone()
                    refused = creates_refused(quota, made, oldest, task.created_at)
                    if refused is not None:
                        raise refused
            conn.execute(sql, row)
            return task

        return await self._write(insert)

    # Lookups are one primary-key probe (tens of microseconds), so they run on the calling thread:
    # handing them to a worker thread cost more than the query itself (about 0.6 ms of CPU per
    # task under load, mostly GIL hand-offs). WAL readers never wait for the writer.

    async def find(self, task_id: str, owner: Owner, now_ms: int) -> TaskRecord | None:
        if not findable(task_id, owner):
            return None
        sql = f"SELECT {COLUMNS} FROM tasks WHERE {_OWNED}"  # noqa: S608
        args = DIALECT.owned_args(task_id, owner, now_ms)
        row = self._read_now(lambda conn: conn.execute(sql, args).fetchone())
        return _record(row) if row is not None else None

    async def scope_of(self, task_id: str, owner: Owner, now_ms: int) -> str | None:
        if not findable(task_id, owner):
            return None
        sql = f"SELECT required_scope FROM tasks WHERE {_OWNED}"  # noqa: S608
        args = DIALECT.owned_args(task_id, owner, now_ms)
        row = self._read_now(lambda conn: conn.execute(sql, args).fetchone())
        return row[0] if row is not None else None

    async def transition(
        self,
        task_id: str,
        owner: Owner,
        *,
        expected_version: int,
        change: Change,
        now_ms: int,
        holder: str | None = None,
        lease_free: bool = False,
    ) -> TaskRecord | None:
        assignments, values = change_assignments(change, now_ms, DIALECT)
        if not findable(task_id, owner) or not storable(holder or ""):
            return None  # the change is storable (its JSON was written above), but no such task is
        where = [_OWNED, ACTIVE, "version = ?"]
        args: list[Any] = [*DIALECT.owned_args(task_id, owner, now_ms), expected_version]
        if holder is not None:
            where.append("lease_holder = ?")
            args.append(holder)
        if lease_free:
            where.append("(lease_holder IS NULL OR lease_expires_at <= ?)")
            args.append(now_ms)
        sql = f"UPDATE tasks SET {assignments} WHERE {' AND '.join(where)} RETURNING {COLUMNS}"  # noqa: S608
        params = (*values, *args)

        def apply(conn: sqlite3.Connection) -> tuple[Any, ...] | None:
            row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
            return row

        row = await self._write(apply)
        return _record(row) if row is not None else None

    async def renew(
        self, holder: str, lease_until_ms: int, now_ms: int, task_ids: Collection[str] | None = None
    ) -> LeaseReport:
        if not storable(holder):
            return LeaseReport(held=frozenset(), cancel_requested=frozenset())
        if task_ids is not None:
            task_ids = [task_id for task_id in task_ids if storable(task_id)]
        sql = (
            f"UPDATE tasks SET lease_expires_at = ? WHERE lease_holder = ? AND {ACTIVE}"  # noqa: S608
            " AND expires_at > ?"
        )
        args: tuple[Any, ...] = (lease_until_ms, holder, now_ms)
        if task_ids is not None:
            sql += " AND task_id IN (SELECT value FROM json_each(?))"
            args = (*args, json.dumps(list(task_ids)))
        sql += " RETURNING task_id, cancel_requested"

        def apply(conn: sqlite3.Connection) -> LeaseReport:
            rows = conn.execute(sql, args).fetchall()
            return LeaseReport(
                held=frozenset(row[0] for row in rows),
                cancel_requested=frozenset(row[0] for row in rows if row[1]),
            )

        return await self._write(apply)

    async def release(self, holder: str, handed_over: Collection[str] | None = None) -> None:
        if not storable(holder):
            return  # nobody can hold a lease under such a name
        if handed_over is not None:
            handed_over = [task_id for task_id in handed_over if storable(task_id)]
        counted = "1" if handed_over is None else "(task_id IN (SELECT value FROM json_each(?)))"
        sql = (
            f"UPDATE tasks SET lease_expires_at = 0, handovers = handovers + {counted}"  # noqa: S608
            f" WHERE lease_holder = ? AND {ACTIVE}"
        )
        args = (holder,) if handed_over is None else (json.dumps(list(handed_over)), holder)
        await self._write(lambda conn: conn.execute(sql, args))

    async def abandon(self, task_id: str, holder: str) -> None:
        if not (storable(task_id) and storable(holder)):
            return
        await self._write(
            lambda conn: conn.execute(
                "UPDATE tasks SET lease_holder = NULL, lease_expires_at = NULL"  # noqa: S608
                f" WHERE task_id = ? AND lease_holder = ? AND {ACTIVE}",
                (task_id, holder),
            )
        )

    async def claim(
        self,
        holder: str,
        now_ms: int,
        lease_until_ms: int,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[TaskRecord]:
        if not storable(holder):
            raise UnstorableTask("a lease holder holds U+0000 or an unpaired surrogate")
        exclude = [task_id for task_id in exclude if storable(task_id)]
        sql = (
            "UPDATE tasks SET lease_holder = ?, lease_expires_at = ?, attempts = attempts + 1"  # noqa: S608
            " WHERE task_id IN ("
            f"  SELECT task_id FROM tasks WHERE {ACTIVE} AND expires_at > ?"
            "   AND (lease_holder IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= ?)"
            "   AND task_id NOT IN (SELECT value FROM json_each(?))"
            "   ORDER BY created_at LIMIT ?)"
            f" RETURNING {COLUMNS}"
        )
        args = (holder, lease_until_ms, now_ms, now_ms, json.dumps(list(exclude)), limit)

        def apply(conn: sqlite3.Connection) -> list[TaskRecord]:
            rows = conn.execute(sql, args).fetchall()
            return [_record(row) for row in rows]

        return await self._write(apply)

    async def sweep(self, now_ms: int, limit: int, keep_created_after_ms: int | None = None) -> int:
        kept = "" if keep_created_after_ms is None else " AND created_at <= ?"
        sql = (
            "DELETE FROM tasks WHERE task_id IN"  # noqa: S608
            f" (SELECT task_id FROM tasks WHERE expires_at <= ?{kept} ORDER BY expires_at LIMIT ?)"
        )
        args = (now_ms, limit) if keep_created_after_ms is None else (now_ms, keep_created_after_ms, limit)

        def apply(conn: sqlite3.Connection) -> int:
            return conn.execute(sql, args).rowcount

        return await self._write(apply)
