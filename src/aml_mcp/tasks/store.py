"""The persistence contract for tasks, kept small so a PostgreSQL store can follow the SQLite one.

Two rules every implementation keeps:

- Per-task reads and writes name the task id **and** the full owner in the query itself, so a
  foreign id behaves exactly like an unknown one; expired tasks are invisible to all of them.
- State changes are compare-and-set on `version` and apply only to active rows: a terminal row
  never changes, whoever asks (the SQLite store adds a trigger as a second wall).

Lease operations (renew, release, claim) work by lease holder instead: they are the runner's
bookkeeping, not a caller's access, and they never touch a task's visible state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.principal import Owner
from aml_mcp.tasks.model import TaskRecord, TaskStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    """New values for a task's state; `None` leaves a field as it is.

    `touch` moves `lastUpdatedAt` (a change the client can see); pure bookkeeping such as
    recording a cancellation intent does not.
    """

    status: TaskStatus | None = None
    status_message: str | None = None
    input_requests: Mapping[str, Any] | None = None
    input_responses: Mapping[str, Any] | None = None
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    cancel_requested: bool | None = None
    touch: bool = True


@dataclass(frozen=True, slots=True)
class LeaseReport:
    """What a heartbeat learned: which tasks are still ours, and which of them a client cancelled."""

    held: frozenset[str]
    cancel_requested: frozenset[str]


class TaskStore(Protocol):
    async def create(self, task: TaskRecord) -> None:
        """Insert a new task; returns once the row is durably committed."""

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

    async def renew(self, holder: str, lease_until_ms: int, now_ms: int) -> LeaseReport:
        """Extend every active lease `holder` has; report what it still holds."""

    async def release(self, holder: str) -> None:
        """Give up every lease `holder` has (graceful stop), so a restarted runner claims them at once."""

    async def claim(self, holder: str, now_ms: int, lease_until_ms: int, limit: int) -> list[TaskRecord]:
        """Take over active tasks whose lease lapsed (their runner died), counting an attempt each."""

    async def sweep(self, now_ms: int, limit: int) -> int:
        """Delete up to `limit` expired tasks; returns how many went."""
