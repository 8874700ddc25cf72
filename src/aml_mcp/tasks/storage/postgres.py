"""`TaskStore` on PostgreSQL, for replicas and workers that share one set of tasks.

The same rules as `sqlite.py`, with PostgreSQL's mechanisms where several processes write at
once:

- Per-task statements name the id and the full owner; CAS on `version`; only active rows change,
  and a PL/pgSQL `BEFORE UPDATE` trigger refuses any change to a terminal row or to a task's
  identity, owner, tool, scope or expiry (the second wall behind the conditional updates).
- The owner columns are `BYTEA` (UTF-8): PostgreSQL `TEXT` cannot hold NUL, and a token's claims
  can. Status messages are stored JSON-encoded for the same reason.
- Quota: `create` is one statement whose first step (`tasks_room`, a PL/pgSQL function)
  takes a transaction-scoped advisory lock on the owner's (issuer, tenant)
  (`LockClass.TASKS_TENANT`) and then counts, each count on a snapshot taken after the lock; the
  insert follows in the same statement and the lock holds to its commit. So two creates of one
  tenant are counted one after the other and can never both see room, and the section they queue
  for is the server's lock-count-insert-commit alone, never a client round trip. An advisory lock
  rather than SERIALIZABLE: it serializes only creates of the same tenant, only when a quota or a
  key applies, and never fails with a serialization error that every caller would have to retry.
- Group commit (`postgres_grouped.py`): creates, and runners' outcomes, that arrive while one
  commits share the next transaction, each still the statement it would be alone.
- Idempotency keys: a keyed create takes the same lock, then looks the key up (owner and key, the
  unique index's columns) before it counts or inserts, so creates racing with one key on any number
  of replicas store one task, and a repeat is answered from the row the first one committed.
- A task left for any runner (unleased) wakes idle workers with `NOTIFY aml_tasks_created` at or
  after its commit, coalesced (`postgres_signal.py`); the claim poll is the backstop.
- `claim` selects in a `MATERIALIZED` CTE with `FOR UPDATE SKIP LOCKED`, then updates the rows it
  locked. The `IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)` form may run its subquery more than
  once and claim more than `n` rows; the materialized CTE runs exactly once.
- Every status change (and every change of an `input_required` task's requests, and every
  progress write: status message or structured progress, at most a few a second per task, the
  runner throttles them) sends `NOTIFY aml_task_events` inside the same transaction, so a
  notification exists if and only if its change committed. The payload is ids only (task id,
  version, owner fields): results can be larger than NOTIFY's 8,000 bytes, and any role that may
  LISTEN reads every payload.
- Times are the caller's `now_ms`, as in the protocol. Processes on PostgreSQL read their time from
  `DatabaseClock` (the database's `clock_timestamp()` plus the monotonic time since the last
  reading), so every process compares leases and expiry on one clock, and tests still move time.

Connection loss, an unreachable server, a full pool and the like leave as `StorageUnavailable`;
anything else (a bug, a constraint) stays what it is.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Collection, Sequence
from typing import Any, TypeVar

import psycopg

from aml_mcp.principal import Owner
from aml_mcp.store.locks import LockClass
from aml_mcp.store.outage import OutageLog
from aml_mcp.store.postgres import PostgresDatabase, storage_fault
from aml_mcp.store.text import storable
from aml_mcp.tasks.model import TERMINAL, TaskRecord
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
from aml_mcp.tasks.storage.postgres_grouped import GroupedWrites, Rows
from aml_mcp.tasks.storage.postgres_schema import MIGRATION as MIGRATION  # every backend exports its own
from aml_mcp.tasks.storage.postgres_signal import CREATED_CHANNEL as CREATED_CHANNEL  # beside the others
from aml_mcp.tasks.storage.postgres_signal import Carried, CreatedSignal

logger = logging.getLogger(__name__)

T = TypeVar("T")

CHANNEL = "aml_task_events"
"""Where status changes are announced (`PostgresDatabase.channel` of it); payload
`{"id", "v", "o": [issuer, subject, tenant, client]}`."""
CONTROL_CHANNEL = "aml_task_control"
"""Signalled in the transaction that requests a running task's cancellation or stores answers for
it, with the lease holder as payload: that runner re-reads its leases at once instead of at its
next heartbeat. Only a runner name travels (host, pid, random bits), never task data."""
MAX_PAYLOAD_BYTES = 7_900
"""NOTIFY refuses payloads of 8,000 bytes or more; an owner that would not fit is left out."""


_T_COLUMNS = ", ".join("t." + column.strip() for column in COLUMNS.split(","))


def _b(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _s(value: bytes | memoryview) -> str:
    return bytes(value).decode("utf-8", "surrogatepass")


def _message(text: str | None) -> str | None:
    return None if text is None else json.dumps(text)


DIALECT = Dialect(placeholder="%s", greatest="GREATEST", owner=_b, message=_message, flag=bool)
"""Owners as UTF-8 bytes and status messages JSON-encoded (`TEXT` cannot hold U+0000), real booleans."""

_OWNED = DIALECT.owned()


def notification_payload(task_id: str, version: int, owner: Owner) -> str:
    """The NOTIFY payload for a task's new version: ids only, the owner left out if it would not fit."""
    payload = json.dumps(
        {"id": task_id, "v": version, "o": [owner.issuer, owner.subject, owner.tenant, owner.client_id]},
        separators=(",", ":"),
    )
    if len(payload.encode()) > MAX_PAYLOAD_BYTES:
        payload = json.dumps({"id": task_id, "v": version}, separators=(",", ":"))
    return payload


_KEYED = DIALECT.keyed()
_CREATE_ARGS = ", ".join(
    f"%s::{kind}" for kind in ("integer", "text", *["bytea"] * 4, *["bigint"] * 3, "boolean", "text")
)
"""`tasks_room`'s arguments: lock class and name, the owner, now, where the window opens, the rate
limit, whether to count, the idempotency key."""
_HELD = 4
"""The column of the create's answer naming the live task its idempotency key already names."""


def _create_statement(values: str, signal: bool) -> str:
    """Counted (`tasks_room`, `postgres_schema.py`) and inserted in one statement, only if
    there is room and the key names no live task; answers (tenant, principal, made in the window, the
    oldest of those, the task the key names, inserted). With `signal`, a last parameter names the
    channel notified if the task was inserted (`postgres_signal.py`)."""
    notify = ", (SELECT pg_notify(%s, '') FROM ins)" if signal else ""
    return (
        f"WITH r AS MATERIALIZED (SELECT * FROM tasks_room({_CREATE_ARGS})),"  # noqa: S608
        f" ins AS (INSERT INTO tasks ({COLUMNS}, idempotency_key) SELECT {values} FROM r"
        "  WHERE r.room_held IS NULL AND r.room_principal < %s AND r.room_tenant < %s AND r.room_made < %s"
        "  RETURNING 1)"
        " SELECT r.room_tenant, r.room_principal, r.room_made, r.room_oldest, r.room_held,"
        f" (SELECT COUNT(*) FROM ins){notify} FROM r"
    )


def _create_params(
    task: TaskRecord, quota: TaskQuota | None, idempotency_key: str | None, row: tuple[Any, ...]
) -> tuple[Any, ...]:
    owner = task.owner
    rate_limit = None if quota is None else quota.created_per_principal
    room = (
        LockClass.TASKS_TENANT,
        tenant_lock_name(owner),
        _b(owner.issuer),
        _b(owner.subject),
        _b(owner.tenant),
        _b(owner.client_id),
        task.created_at,
        0 if quota is None else quota.window_opens_after(task.created_at),
        0 if rate_limit is None else rate_limit,  # no limit: count nothing, and 0 < 1 below
        quota is not None,
        idempotency_key,
    )
    if quota is None:  # nothing counted: every count is 0
        return (*room, *row, 1, 1, 1)
    limit = 1 if rate_limit is None else rate_limit
    return (*room, *row, quota.active_per_principal, quota.active_per_tenant, limit)


def _refuse_uncounted(counted: tuple[Any, ...], quota: TaskQuota, now_ms: int) -> None:
    """The refusal a counted insert that inserted nothing stands for (nothing when it inserted)."""
    tenant, principal, made, oldest, _held, inserted = counted[:6]
    if inserted:
        return
    if principal >= quota.active_per_principal:
        raise QuotaExceeded("principal", quota.active_per_principal)
    if tenant >= quota.active_per_tenant:
        raise QuotaExceeded("tenant", quota.active_per_tenant)
    refused = creates_refused(quota, made, oldest, now_ms)
    assert refused is not None  # the insert's only other condition
    raise refused


_TERMINAL = frozenset(status.value for status in TERMINAL)
_AT = {name.strip(): index for index, name in enumerate(COLUMNS.split(","))}
"""Where a row of `COLUMNS` holds each column."""
_OWNER_COLUMNS = slice(_AT["owner_issuer"], _AT["owner_client_id"] + 1)
TERMINAL_ROWS_BYTES = 16 * 1024 * 1024
"""What the rows of terminal tasks kept in memory may hold in all (text and bytes); a row larger
than a sixteenth of it is not kept."""


class _TerminalRows:
    """Rows of terminal tasks this process read or wrote, answered again without the database.

    Exact, not a staleness trade: a terminal row never changes (the guard trigger refuses any
    update), and it is deleted only once it has expired (the sweeper and a reused idempotency key
    both require `expires_at <= now`), so until its `expires_at` a kept row is what the database
    holds. A `tasks/get` poll of a finished task, the commonest read, then costs no statement on any
    replica that has seen it. Only a lookup by the row's own id and owner is answered here; any
    other lookup goes to the database as before, so no caller learns anything from the timing."""

    def __init__(self, budget: int = TERMINAL_ROWS_BYTES) -> None:
        self._budget = budget
        self._rows: OrderedDict[str, tuple[tuple[Any, ...], tuple[bytes, ...], int]] = OrderedDict()
        """Task id → (row, its owner as `_owner_key` gives it, its size)."""
        self._bytes = 0

    def find(self, task_id: str, owner: tuple[bytes, ...], now_ms: int) -> tuple[Any, ...] | None:
        kept = self._rows.get(task_id)
        if kept is None:
            return None
        row, row_owner, _ = kept
        if row[_AT["expires_at"]] <= now_ms:
            self._drop(task_id)
            return None
        if row_owner != owner:
            return None
        self._rows.move_to_end(task_id)
        return row

    def keep(self, row: tuple[Any, ...]) -> None:
        if row[_AT["status"]] not in _TERMINAL:
            return
        size = sum(len(value) for value in row if isinstance(value, str | bytes))
        task_id = row[_AT["task_id"]]
        if size > self._budget // 16 or task_id in self._rows:
            return
        self._rows[task_id] = (row, tuple(bytes(value) for value in row[_OWNER_COLUMNS]), size)
        self._bytes += size
        while self._bytes > self._budget:
            self._drop(next(iter(self._rows)))

    def _drop(self, task_id: str) -> None:
        *_, size = self._rows.pop(task_id)
        self._bytes -= size


def _in_lock_order(where: str) -> str:
    """The ids of the tasks `where` selects, their rows locked in task-id order: the order a group of
    outcome writes locks its rows in (`postgres_grouped.py`), so the two never deadlock."""
    return f"SELECT task_id FROM tasks WHERE {where} ORDER BY task_id FOR UPDATE"  # noqa: S608


def tenant_lock_name(owner: Owner) -> str:
    """What the owner's (issuer, tenant) lock is named in `LockClass.TASKS_TENANT` (its second key is
    `hashtext` of it): length-prefixed, so no two (issuer, tenant) pairs join to the same text, and
    with backslash and U+0000 (which a claim may hold and `TEXT` cannot) escaped, so it can be sent.
    Two pairs whose names hash alike share a lock: their creates queue, nothing more."""
    name = f"{len(owner.issuer)}:{owner.issuer}{owner.tenant}"
    return name.replace("\\", "\\\\").replace("\x00", "\\0")


def _owner_key(owner: Owner) -> tuple[bytes, ...]:
    """The owner as a row of `COLUMNS` holds it (`_OWNER_COLUMNS`)."""
    return (_b(owner.issuer), _b(owner.subject), _b(owner.tenant), _b(owner.client_id))


def _record(row: tuple[Any, ...]) -> TaskRecord:
    message = row[10]
    return record_of(
        row,
        owner=Owner(_s(row[1]), _s(row[2]), _s(row[3]), _s(row[4])),
        status_message=json.loads(message) if message is not None else None,
    )


class PostgresTaskStore:
    """Tasks in the `tasks` table of a PostgreSQL database; apply `MIGRATION` first."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self._created = CreatedSignal(database)
        self._terminal = _TerminalRows()
        self._creates = self._grouped()
        self._outcomes = self._grouped()
        """Creates, and runners' outcome writes, committed a group at a time (`postgres_grouped.py`)."""
        self._outage = OutageLog(
            logger,
            down="task storage unavailable ({cause}: {error});"
            " callers get a retryable error until it recovers",
            up="task storage available again (after: {cause})",
        )

    def _fault(self, exc: BaseException) -> StorageUnavailable | None:
        cause = storage_fault(exc)
        if cause is None:
            return None
        self._outage.failed(cause, exc)
        return StorageUnavailable(cause)

    def _recovered(self) -> None:
        self._outage.recovered()

    async def _run(self, query: str, params: Any = ()) -> list[tuple[Any, ...]]:
        """One statement, its own transaction (a `WITH ... UPDATE ... pg_notify` included: the
        notification goes out at that statement's commit); the rows it returns (if any)."""
        return await self._faults_as_unavailable(self._db.execute(query, params))

    async def _faults_as_unavailable(
        self, statements: Awaitable[T], *, left: tuple[type[Exception], ...] = ()
    ) -> T:
        """What `statements` answer, a storage fault among their errors as `StorageUnavailable`
        (errors of the `left` types stay what they are)."""
        try:
            answer = await statements
        except left:
            raise
        except Exception as exc:  # psycopg's errors and the pool's own (closed, timed out)
            fault = self._fault(exc)
            if fault is None:
                raise
            raise fault from exc
        self._recovered()
        return answer

    def _grouped(self) -> GroupedWrites:
        return GroupedWrites(self._run, self._run_together, lambda exc: isinstance(exc, StorageUnavailable))

    async def _run_together(self, statements: Sequence[tuple[str, Any]]) -> list[Rows]:
        """Statements as one transaction (`PostgresDatabase.execute_together`), faults as in `_run`;
        a deadlock or serialization failure is the group's conflict, not a fault: left as it is, so
        the statements run again one by one."""
        return await self._faults_as_unavailable(
            self._db.execute_together(statements), left=(psycopg.errors.TransactionRollback,)
        )

    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        refuse_unstorable_key(idempotency_key)
        row = (*task_row(task, DIALECT), idempotency_key)
        values = ", ".join(["%s"] * len(row))
        order = tenant_lock_name(task.owner)
        carried = self._created.due() if task.lease_holder is None else None
        signal = () if carried is None else (self._created.channel,)  # the last parameter, if any
        if quota is None and idempotency_key is None:
            notify = " RETURNING pg_notify(%s, '')" if signal else ""
            insert = f"INSERT INTO tasks ({COLUMNS}, idempotency_key) VALUES ({values}){notify}"  # noqa: S608
            await self._creates.execute(order, insert, (*row, *signal))
            self._stored(task, carried)
            return task
        params = (*_create_params(task, quota, idempotency_key, row), *signal)
        [counted] = await self._creates.execute(order, _create_statement(values, bool(signal)), params)
        held = counted[_HELD]
        if held is not None:
            rows = await self._run(
                f"SELECT {COLUMNS} FROM tasks WHERE task_id = %s AND {_KEYED}",  # noqa: S608
                (held, *DIALECT.keyed_args(idempotency_key or "", task.owner)),
            )
            if rows:
                return _record(rows[0])
            return await self.create(task, quota, idempotency_key=idempotency_key)  # swept meanwhile
        if quota is not None:
            _refuse_uncounted(counted, quota, task.created_at)
        self._stored(task, carried)
        return task

    def _stored(self, task: TaskRecord, carried: Carried | None) -> None:
        """A new task committed: idle workers are woken if it is left for any runner to claim (by
        the signal it carried, or by one to come)."""
        if task.lease_holder is None:
            self._created.committed(carried)

    async def find(self, task_id: str, owner: Owner, now_ms: int) -> TaskRecord | None:
        if not findable(task_id, owner):
            return None
        kept = self._terminal.find(task_id, _owner_key(owner), now_ms)
        if kept is not None:
            return _record(kept)
        sql = f"SELECT {COLUMNS} FROM tasks WHERE {_OWNED}"  # noqa: S608
        rows = await self._run(sql, DIALECT.owned_args(task_id, owner, now_ms))
        if not rows:
            return None
        self._terminal.keep(rows[0])
        return _record(rows[0])

    async def scope_of(self, task_id: str, owner: Owner, now_ms: int) -> str | None:
        if not findable(task_id, owner):
            return None
        kept = self._terminal.find(task_id, _owner_key(owner), now_ms)
        if kept is not None:
            scope: str | None = kept[_AT["required_scope"]]
            return scope
        sql = f"SELECT required_scope FROM tasks WHERE {_OWNED}"  # noqa: S608
        rows = await self._run(sql, DIALECT.owned_args(task_id, owner, now_ms))
        return rows[0][0] if rows else None

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
        where = [_OWNED, ACTIVE, "version = %s"]
        args: list[Any] = [*DIALECT.owned_args(task_id, owner, now_ms), expected_version]
        if holder is not None:
            where.append("lease_holder = %s")
            args.append(holder)
        if lease_free:
            where.append("(lease_holder IS NULL OR lease_expires_at <= %s)")
            args.append(now_ms)
        update = f"UPDATE tasks SET {assignments} WHERE {' AND '.join(where)} RETURNING {COLUMNS}"  # noqa: S608
        params: list[Any] = [*values, *args]
        # Notifications are part of the transition's own statement: sent at commit, or never.
        notices: list[str] = []
        if change.visible:  # a status, an input request or progress: what listen streams carry
            notices.append("pg_notify(%s, %s)")
            params += [self._db.channel(CHANNEL), notification_payload(task_id, expected_version + 1, owner)]
        if change.cancel_requested or change.input_responses is not None:
            # Whoever runs the task hears it now, not at its next heartbeat (if anyone runs it).
            notices.append("CASE WHEN u.lease_holder IS NOT NULL THEN pg_notify(%s, u.lease_holder) END")
            params.append(self._db.channel(CONTROL_CHANNEL))
        if notices:
            update = f"WITH u AS ({update}) SELECT u.*, {', '.join(notices)} FROM u"  # noqa: S608
        if holder is not None and change.status in TERMINAL:  # a runner's outcome: may share a commit
            rows = await self._outcomes.execute(task_id, update, params)
        else:
            rows = await self._run(update, params)
        if not rows:
            return None
        row = rows[0][: -len(notices)] if notices else rows[0]
        self._terminal.keep(row)  # the outcome, as the next get on this process will read it
        return _record(row)

    async def renew(
        self, holder: str, lease_until_ms: int, now_ms: int, task_ids: Collection[str] | None = None
    ) -> LeaseReport:
        if not storable(holder):
            return LeaseReport(held=frozenset(), cancel_requested=frozenset())
        where = f"lease_holder = %s AND {ACTIVE} AND expires_at > %s"
        args: list[Any] = [lease_until_ms, holder, now_ms]
        if task_ids is not None:
            where += " AND task_id = ANY(%s)"
            args.append([task_id for task_id in task_ids if storable(task_id)])
        rows = await self._run(
            f"UPDATE tasks SET lease_expires_at = %s WHERE task_id IN ({_in_lock_order(where)})"  # noqa: S608
            " RETURNING task_id, cancel_requested",
            args,
        )
        return LeaseReport(
            held=frozenset(row[0] for row in rows),
            cancel_requested=frozenset(row[0] for row in rows if row[1]),
        )

    async def release(self, holder: str, handed_over: Collection[str] | None = None) -> None:
        if not storable(holder):
            return  # nobody can hold a lease under such a name
        if handed_over is not None:
            handed_over = [task_id for task_id in handed_over if storable(task_id)]
        args: list[Any]
        if handed_over is None:
            counted, args = "1", [holder]
        else:
            counted, args = "(task_id = ANY(%s))::int", [list(handed_over), holder]
        sql = (
            f"UPDATE tasks SET lease_expires_at = 0, handovers = handovers + {counted}"  # noqa: S608
            f" WHERE task_id IN ({_in_lock_order(f'lease_holder = %s AND {ACTIVE}')})"
        )
        await self._run(sql, args)

    async def abandon(self, task_id: str, holder: str) -> None:
        if not (storable(task_id) and storable(holder)):
            return
        await self._run(
            "UPDATE tasks SET lease_holder = NULL, lease_expires_at = NULL"  # noqa: S608
            f" WHERE task_id = %s AND lease_holder = %s AND {ACTIVE}",
            (task_id, holder),
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
        # MATERIALIZED: the locking subquery runs once, so no more than `limit` rows are taken.
        sql = (
            "WITH c AS MATERIALIZED ("  # noqa: S608
            f"  SELECT task_id FROM tasks WHERE {ACTIVE} AND expires_at > %s"
            "   AND (lease_holder IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= %s)"
            "   AND NOT (task_id = ANY(%s))"
            "   ORDER BY created_at LIMIT %s"
            "   FOR UPDATE SKIP LOCKED)"
            " UPDATE tasks t SET lease_holder = %s, lease_expires_at = %s, attempts = t.attempts + 1"
            f" FROM c WHERE t.task_id = c.task_id RETURNING {_T_COLUMNS}"
        )
        rows = await self._run(sql, (now_ms, now_ms, list(exclude), limit, holder, lease_until_ms))
        return sorted((_record(row) for row in rows), key=lambda task: task.created_at)

    async def sweep(self, now_ms: int, limit: int, keep_created_after_ms: int | None = None) -> int:
        # The batch is chosen once (MATERIALIZED), so a sweep deletes at most `limit` rows, and
        # rows another sweeper is deleting are skipped instead of waited for.
        kept = "" if keep_created_after_ms is None else " AND created_at <= %s"
        args = (now_ms, limit) if keep_created_after_ms is None else (now_ms, keep_created_after_ms, limit)
        rows = await self._run(
            f"WITH c AS MATERIALIZED (SELECT task_id FROM tasks WHERE expires_at <= %s{kept}"  # noqa: S608
            " ORDER BY expires_at LIMIT %s FOR UPDATE SKIP LOCKED)"
            " DELETE FROM tasks t USING c WHERE t.task_id = c.task_id RETURNING 1",
            args,
        )
        return len(rows)


async def count_by_status(database: PostgresDatabase) -> dict[str, int]:
    """Tasks by status (expired ones not yet swept included): for `/metrics`."""
    rows = await database.execute("SELECT status, COUNT(*) FROM tasks GROUP BY status")
    return {str(status): int(count) for status, count in rows}
