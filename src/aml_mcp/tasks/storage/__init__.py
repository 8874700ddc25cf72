"""The persistence contract for tasks, kept small so a PostgreSQL store can follow the SQLite one.

Two rules every implementation keeps:

- Per-task reads and writes name the task id **and** the full owner in the query itself, so a
  foreign id behaves exactly like an unknown one; expired tasks are invisible to all of them.
- State changes are compare-and-set on `version` and apply only to active rows: a terminal row
  never changes, whoever asks (the SQLite store adds a trigger as a second wall).

Lease operations (renew, release, abandon, claim) work by lease holder instead: they are the
runner's bookkeeping, not a caller's access, and they never touch a task's visible state.

Every operation either happens completely or not at all. When the storage itself fails (disk
full, locked past its timeout, read-only, I/O error, closed) it raises `StorageUnavailable`, so
callers can tell a transient condition from a bug and nobody has to know the database's errors.

This package holds what both backends share: the protocol, its records and refusals, what a task
row is (`COLUMNS`, `record_of`) and how one is written (`task_row`, `change_assignments`, each
told the few differences by the backend's `Dialect`). `sqlite.py` and `postgres.py` hold the rest:
each backend's own SQL, as plain text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from aml_mcp.principal import Owner
from aml_mcp.store.faults import StorageFault
from aml_mcp.store.text import storable, unicode_text
from aml_mcp.tasks.model import Progress, TaskRecord, TaskStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """New values for a task's state; `None` leaves a field as it is.

    `touch` moves `lastUpdatedAt` (a change the client can see); pure bookkeeping such as
    recording a cancellation intent does not.
    """

    status: TaskStatus | None = None
    status_message: str | None = None
    progress: Progress | None = None
    input_requests: Mapping[str, Any] | None = None
    input_responses: Mapping[str, Any] | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    cancel_requested: bool | None = None
    touch: bool = True

    @property
    def visible(self) -> bool:
        """Whether listen streams hear of it: a new status, what an `input_required` task asks, or
        progress (status message or structured) — everything `tasks/get` shows but the bookkeeping."""
        return (
            self.status is not None
            or self.input_requests is not None
            or self.status_message is not None
            or self.progress is not None
        )


class UnstorableTask(ValueError):
    """A write holding text no task store keeps as written, refused before anything is sent.

    The rule is the same on SQLite and PostgreSQL: ids, tool, scope and lease holder are `TEXT`
    on PostgreSQL, which cannot hold U+0000, so none may hold it; nothing anywhere may hold an
    unpaired surrogate (neither driver can encode one). Owners are kept as bytes on PostgreSQL
    and JSON documents escape NUL, so those may hold U+0000. A lookup by such a value is no
    refusal: it simply finds nothing."""


def _owner_text(owner: Owner) -> bool:
    return all(unicode_text(value) for value in (owner.issuer, owner.subject, owner.tenant, owner.client_id))


def findable(task_id: str, owner: Owner) -> bool:
    """Whether a task with this id and owner could be stored at all: when not, a lookup answers
    "no such task" without asking the database (which would fail on the value, not miss it)."""
    return storable(task_id) and _owner_text(owner)


def refuse_unstorable(task: TaskRecord) -> None:
    """Raise `UnstorableTask` unless every text of a new task is one both stores keep as written
    (its JSON documents are checked as they are written, by `json_text`)."""
    columns = (task.task_id, task.tool, task.scope, task.lease_holder)
    if not all(storable(value) for value in columns if value is not None):
        raise UnstorableTask("a task id, tool, scope or lease holder holds U+0000 or an unpaired surrogate")
    if not _owner_text(task.owner) or not unicode_text(task.status_message or ""):
        raise UnstorableTask("a task's owner or status message holds an unpaired surrogate")


MAX_KEY_CHARS = 255
"""The longest idempotency key a store keeps: keys are indexed (with the owner), and an index entry
has a size limit on PostgreSQL. As long as the protocol layer accepts (a test keeps them equal)."""


def refuse_unstorable_key(idempotency_key: str | None) -> None:
    """Raise `UnstorableTask` unless an idempotency key can be kept and indexed as written (both
    stores keep it as `TEXT`; the protocol layer refuses anything but short printable ASCII first)."""
    if idempotency_key is None:
        return
    if not storable(idempotency_key) or len(idempotency_key) > MAX_KEY_CHARS:
        raise UnstorableTask(
            f"an idempotency key holds U+0000 or an unpaired surrogate, or is over {MAX_KEY_CHARS} characters"
        )


def refuse_unstorable_change(change: Change) -> None:
    """Raise `UnstorableTask` unless the change's status message can be stored (its JSON documents
    are checked as they are written, by `json_text`)."""
    if not unicode_text(change.status_message or ""):
        raise UnstorableTask("a status message holds an unpaired surrogate")


def json_text(value: Mapping[str, Any] | None) -> str | None:
    """A JSON column as both stores write it (compact, non-ASCII kept), or `UnstorableTask` when the
    document holds an unpaired surrogate: JSON escapes U+0000, but neither driver can send that."""
    if value is None:
        return None
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if not unicode_text(text):
        raise UnstorableTask("a task's JSON document holds an unpaired surrogate")
    return text


class StorageUnavailable(StorageFault):
    """The store cannot do the operation right now, for a reason that is not the caller's; nothing
    of it was applied. `cause` is short and fit for a client ("disk full", "database busy")."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"task storage unavailable: {cause}", cause)


@dataclass(frozen=True, slots=True)
class TaskQuota:
    """Limits `create` checks in the same transaction as the insert, so concurrent creates cannot
    overshoot them. Principal = (issuer, tenant, subject); tenant = (issuer, tenant)."""

    active_per_principal: int
    active_per_tenant: int
    created_per_principal: int | None = None
    """Creates one principal may make within `window_ms`, whatever became of the tasks: a task that
    completes at once still counts, so a flood of instant tasks is bounded, not only a backlog.
    Counted from the task rows themselves (`created_at`, on the clock the stores' callers share), so
    it holds across processes. `None`: no such limit."""
    window_ms: int = 60_000
    """The sliding window of `created_per_principal`: a create `window_ms` old no longer counts."""

    def window_opens_after(self, now_ms: int) -> int:
        """Creates made after this moment are in the window (`created_at > window_opens_after`)."""
        return now_ms - self.window_ms


class QuotaExceeded(Exception):
    """`create` refused: the owner's principal (`per="principal"`) or tenant already has `limit`
    unfinished tasks. Nothing was stored."""

    def __init__(self, per: str, limit: int, message: str | None = None) -> None:
        super().__init__(message or f"{per} already has {limit} unfinished tasks")
        self.per = per
        self.limit = limit


class CreateRateExceeded(QuotaExceeded):
    """`create` refused: the owner's principal already created `limit` tasks within the quota's
    window. Room comes back when the oldest of the newest `limit` leaves the window, in
    `retry_after_ms`. Nothing was stored."""

    def __init__(self, limit: int, window_ms: int, retry_after_ms: int) -> None:
        super().__init__("principal", limit, f"principal already created {limit} tasks within {window_ms} ms")
        self.window_ms = window_ms
        self.retry_after_ms = retry_after_ms


def creates_refused(
    quota: TaskQuota, counted: int, oldest: int | None, now_ms: int
) -> CreateRateExceeded | None:
    """The refusal of a create, given what a store counted in the window, or `None` when there is room.

    Stores count only the newest `created_per_principal` creates of the window (an index range of
    bounded length, however hard a principal pushed before the limit existed), `oldest` being the
    oldest of those: it is the one whose leaving the window frees a slot.
    """
    limit = quota.created_per_principal
    if limit is None or counted < limit:
        return None
    leaves_at = (oldest if oldest is not None else now_ms) + quota.window_ms
    return CreateRateExceeded(limit, quota.window_ms, max(1, leaves_at - now_ms))


@dataclass(frozen=True, slots=True)
class LeaseReport:
    """What a heartbeat learned: which tasks are still ours, and which of them a client cancelled."""

    held: frozenset[str]
    cancel_requested: frozenset[str]


class TaskStore(Protocol):
    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        """Insert a new task; returns once the row is durably committed, with the task that holds
        the create: `task` itself.

        With `quota`, raises `QuotaExceeded` instead when the owner is at a limit. With
        `idempotency_key`, a live task of the same owner created with that key earlier is returned
        instead, and nothing is inserted or counted (a retried create names the same task); an
        expired one that still holds the key is deleted first, so the key names a new task. Two
        creates racing with one key store one task: the key is unique per owner.
        """

    async def find(self, task_id: str, owner: Owner, now_ms: int) -> TaskRecord | None:
        """The live task with this id and owner, or `None` (unknown, foreign and expired alike)."""

    async def scope_of(self, task_id: str, owner: Owner, now_ms: int) -> str | None:
        """The scope the task's tool required, or `None` (no scope, or no such task for this owner)."""

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
        """Apply `change` if the task is live, active and still at `expected_version`.

        `holder` additionally requires that lease holder; `lease_free` requires that nobody holds a
        current lease. Returns the task as changed (durably committed), or `None` if nothing was.
        """

    async def renew(
        self, holder: str, lease_until_ms: int, now_ms: int, task_ids: Collection[str] | None = None
    ) -> LeaseReport:
        """Extend the active leases `holder` has (only those of `task_ids` when given: a runner
        renews the tasks it still runs, never one whose body is gone); report what it still holds."""

    async def release(self, holder: str, handed_over: Collection[str] | None = None) -> None:
        """Give up every lease `holder` has (graceful stop), so a restarted runner claims them at once.

        Each of `handed_over` (default: every task released) counts one more in `handovers`: the
        run the stop interrupted is not a crash, and its re-run does not use up an attempt.
        """

    async def abandon(self, task_id: str, holder: str) -> None:
        """Give up `holder`'s lease on one task whose body could not go on (its next run, if any,
        counts as an attempt): nobody holds it, so recovery takes it over at once instead of when
        the lease lapses, and a cancellation ends it on the spot."""

    async def claim(
        self,
        holder: str,
        now_ms: int,
        lease_until_ms: int,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[TaskRecord]:
        """Take over active tasks whose lease lapsed (their runner died), counting an attempt each.

        `exclude` names tasks the claiming runner still runs itself (a lease that lapsed while the
        store was unreachable is renewed by the next heartbeat, not claimed again).
        """

    async def sweep(self, now_ms: int, limit: int, keep_created_after_ms: int | None = None) -> int:
        """Delete up to `limit` expired tasks; returns how many went.

        With `keep_created_after_ms`, an expired task created after that moment stays (invisible to
        every lookup, as expired tasks are) until it is older: the create-rate window counts it.
        """


# A task row as both stores keep it: each store owns its SQL; what a row means is the same on both.
COLUMNS = (
    "task_id, owner_issuer, owner_subject, owner_tenant, owner_client_id, tool, required_scope,"
    " arguments, client_capabilities, status, status_message, input_requests, input_responses,"
    " result, error, cancel_requested, created_at, updated_at, ttl_ms, expires_at, version,"
    " lease_holder, lease_expires_at, attempts, handovers, progress"
)
"""Every column, in the order `record_of` reads them (`SELECT {COLUMNS}`, `RETURNING {COLUMNS}`)."""


def load_json(text: str) -> Any:
    """A JSON column; the empty object, by far the most common value, without parsing it."""
    return {} if text == "{}" else json.loads(text)


def record_of(row: Sequence[Any], *, owner: Owner, status_message: str | None) -> TaskRecord:
    """The record of a row of `COLUMNS`. The owner and status message come decoded by the store,
    since each engine keeps them in its own column type (text on SQLite; bytes and JSON on PostgreSQL)."""
    (
        task_id,
        _issuer,
        _subject,
        _tenant,
        _client_id,
        tool,
        scope,
        arguments,
        capabilities,
        status,
        _message,
        requests,
        responses,
        result,
        error,
        cancel_requested,
        created_at,
        updated_at,
        ttl_ms,
        expires_at,
        version,
        lease_holder,
        lease_expires_at,
        attempts,
        handovers,
        progress,
    ) = row
    return TaskRecord(
        task_id=task_id,
        owner=owner,
        tool=tool,
        scope=scope,
        arguments=load_json(arguments),
        client_capabilities=load_json(capabilities),
        status=TaskStatus(status),
        status_message=status_message,
        progress=Progress.from_wire(json.loads(progress)) if progress is not None else None,
        input_requests=load_json(requests),
        input_responses=load_json(responses),
        result=json.loads(result) if result is not None else None,
        error=json.loads(error) if error is not None else None,
        cancel_requested=bool(cancel_requested),
        created_at=created_at,
        updated_at=updated_at,
        ttl_ms=ttl_ms,
        expires_at=expires_at,
        version=version,
        lease_holder=lease_holder,
        lease_expires_at=lease_expires_at,
        attempts=attempts,
        handovers=handovers,
    )


# -- writing a row ---------------------------------------------------------------------------------
# Both stores write the same columns from the same record and change them by the same rules; what
# differs is a few spellings and column types, which each store's `Dialect` names, so every value is
# encoded in one place and a column added to a task is added once.

ACTIVE = "status IN ('working', 'input_required')"
"""The condition of an unfinished task: the only rows a state change or a lease operation touches."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """What sets one backend's task SQL apart where both stores otherwise say the same."""

    placeholder: str
    """How a statement marks a parameter (`?`, `%s`)."""
    greatest: str
    """The function for the larger of two values (`MAX`, `GREATEST`)."""
    owner: Callable[[str], Any]
    """An owner field as its column keeps it (text; or UTF-8 bytes where `TEXT` cannot hold the
    U+0000 a token's claims may carry)."""
    message: Callable[[str | None], str | None]
    """A status message as its column keeps it (as written; or JSON-encoded, for the same reason)."""
    flag: Callable[[bool], Any]
    """A boolean column's value (0 or 1 where there is no boolean type)."""

    def owned(self) -> str:
        """The condition naming one live task by its id and full owner; its values: `owned_args`."""
        p = self.placeholder
        return (
            f"task_id = {p} AND owner_issuer = {p} AND owner_subject = {p} AND owner_tenant = {p}"
            f" AND owner_client_id = {p} AND expires_at > {p}"
        )

    def owned_args(self, task_id: str, owner: Owner, now_ms: int) -> tuple[Any, ...]:
        encode = self.owner
        fields = (owner.issuer, owner.subject, owner.tenant, owner.client_id)
        return (task_id, *(encode(value) for value in fields), now_ms)

    def keyed(self) -> str:
        """The condition naming the task one owner created with an idempotency key, live or expired
        (the unique index's columns); its values: `keyed_args`."""
        p = self.placeholder
        return (
            f"idempotency_key = {p} AND owner_issuer = {p} AND owner_subject = {p}"
            f" AND owner_tenant = {p} AND owner_client_id = {p}"
        )

    def keyed_args(self, idempotency_key: str, owner: Owner) -> tuple[Any, ...]:
        fields = (owner.issuer, owner.subject, owner.tenant, owner.client_id)
        return (idempotency_key, *(self.owner(value) for value in fields))


def progress_text(progress: Progress | None) -> str | None:
    """The `progress` column (compact JSON of numbers, the same on both stores), or `None`."""
    return None if progress is None else json_text(progress.wire())


def task_row(task: TaskRecord, dialect: Dialect) -> tuple[Any, ...]:
    """A new task's values in `COLUMNS` order, as `dialect`'s columns keep them; `UnstorableTask`
    (before anything is sent) when a store could not keep it as written."""
    refuse_unstorable(task)
    owner = task.owner
    return (
        task.task_id,
        dialect.owner(owner.issuer),
        dialect.owner(owner.subject),
        dialect.owner(owner.tenant),
        dialect.owner(owner.client_id),
        task.tool,
        task.scope,
        json_text(task.arguments),
        json_text(task.client_capabilities),
        task.status.value,
        dialect.message(task.status_message),
        json_text(task.input_requests),
        json_text(task.input_responses),
        json_text(task.result),
        json_text(task.error),
        dialect.flag(task.cancel_requested),
        task.created_at,
        task.updated_at,
        task.ttl_ms,
        task.expires_at,
        task.version,
        task.lease_holder,
        task.lease_expires_at,
        task.attempts,
        task.handovers,
        progress_text(task.progress),
    )


def change_assignments(change: Change, now_ms: int, dialect: Dialect) -> tuple[str, list[Any]]:
    """A transition's `SET` list and its values, in order: the version always moves on, each field
    the change gives is written, `touch` moves `updated_at` (never back), and a terminal status
    gives the lease up. `UnstorableTask` (before anything is sent) for a change no store keeps."""
    refuse_unstorable_change(change)
    p = dialect.placeholder
    sets = ["version = version + 1"]
    values: list[Any] = []
    cancel_requested = change.cancel_requested
    for column, value in (
        ("status", change.status.value if change.status is not None else None),
        ("status_message", dialect.message(change.status_message)),
        ("progress", progress_text(change.progress)),
        ("input_requests", json_text(change.input_requests)),
        ("input_responses", json_text(change.input_responses)),
        ("result", json_text(change.result)),
        ("error", json_text(change.error)),
        ("cancel_requested", dialect.flag(cancel_requested) if cancel_requested is not None else None),
    ):
        if value is not None:
            sets.append(f"{column} = {p}")
            values.append(value)
    if change.touch:
        sets.append(f"updated_at = {dialect.greatest}(updated_at, {p})")
        values.append(now_ms)
    if change.status is not None and change.status.terminal:
        sets.append("lease_holder = NULL, lease_expires_at = NULL")
    return ", ".join(sets), values


# -- store latency ---------------------------------------------------------------------------------
# Why at this seam: every task operation of every caller, runner and sweeper passes through the
# `TaskStore` protocol, on SQLite and on PostgreSQL alike, so one wrapper measures both backends the
# same way, and the stores keep only their SQL. A failed operation (`StorageUnavailable`, a quota
# refusal) is measured too: a slow outage is exactly what an operator needs to see.

StoreObserver = Callable[[str, float], None]
"""Called with the operation's name (`create`, `find`, ...) and its duration in seconds."""

T = TypeVar("T")


class TimedTaskStore:
    """Wraps a `TaskStore`; each operation's wall time goes to `observe` when it ends."""

    def __init__(self, inner: TaskStore, observe: StoreObserver) -> None:
        self._inner = inner
        self._observe = observe

    async def _timed(self, operation: str, call: Awaitable[T]) -> T:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self._observe(operation, time.perf_counter() - started)

    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        return await self._timed("create", self._inner.create(task, quota, idempotency_key=idempotency_key))

    async def find(self, task_id: str, owner: Owner, now_ms: int) -> TaskRecord | None:
        return await self._timed("find", self._inner.find(task_id, owner, now_ms))

    async def scope_of(self, task_id: str, owner: Owner, now_ms: int) -> str | None:
        return await self._timed("scope_of", self._inner.scope_of(task_id, owner, now_ms))

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
        return await self._timed(
            "transition",
            self._inner.transition(
                task_id,
                owner,
                expected_version=expected_version,
                change=change,
                now_ms=now_ms,
                holder=holder,
                lease_free=lease_free,
            ),
        )

    async def renew(
        self, holder: str, lease_until_ms: int, now_ms: int, task_ids: Collection[str] | None = None
    ) -> LeaseReport:
        return await self._timed("renew", self._inner.renew(holder, lease_until_ms, now_ms, task_ids))

    async def release(self, holder: str, handed_over: Collection[str] | None = None) -> None:
        await self._timed("release", self._inner.release(holder, handed_over))

    async def abandon(self, task_id: str, holder: str) -> None:
        await self._timed("abandon", self._inner.abandon(task_id, holder))

    async def claim(
        self,
        holder: str,
        now_ms: int,
        lease_until_ms: int,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[TaskRecord]:
        return await self._timed("claim", self._inner.claim(holder, now_ms, lease_until_ms, limit, exclude))

    async def sweep(self, now_ms: int, limit: int, keep_created_after_ms: int | None = None) -> int:
        return await self._timed("sweep", self._inner.sweep(now_ms, limit, keep_created_after_ms))
