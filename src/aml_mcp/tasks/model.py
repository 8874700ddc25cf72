"""Task states, the transitions between them, and the record the store keeps for each task.

The record is plain data: the owner is the four separate `Owner` fields (never a joined string),
times are integer epoch milliseconds, and the input-request maps are JSON-ready dicts, so a
PostgreSQL store can hold exactly the same thing.
"""

from __future__ import annotations

import base64
import os
import secrets
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aml_mcp.principal import Owner


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskStatus] = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
ACTIVE: frozenset[TaskStatus] = frozenset({TaskStatus.WORKING, TaskStatus.INPUT_REQUIRED})

TASK_ID_BYTES = 24
"""192 random bits: unguessable, so the id alone never lets anyone enumerate tasks."""

_POOL_IDS = 256


class _RandomPool:
    """Bytes from `secrets`, drawn a few kilobytes at a time and each handed out exactly once.

    `os.urandom` releases the GIL, and under load getting it back costs far more than the read
    itself (measured: ~0.15 ms per task id with the database threads busy). A pool filled in
    one call keeps that to once per 256 ids. A forked child discards its parent's pool, so two
    processes never hand out the same bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = -1
        self._buffer = b""
        self._offset = 0

    def take(self, size: int) -> bytes:
        with self._lock:
            if self._pid != os.getpid() or self._offset + size > len(self._buffer):
                self._buffer = secrets.token_bytes(size * _POOL_IDS)
                self._offset = 0
                self._pid = os.getpid()
            chunk = self._buffer[self._offset : self._offset + size]
            self._offset += size
            return chunk


_POOL = _RandomPool()


def new_task_id() -> str:
    """A fresh task id: `TASK_ID_BYTES` random bytes from `secrets`, base64url without padding.

    One that would begin with `-` is drawn again (1 in 64): a shell command line takes such an id
    for an option (`aml-mcp task get -p6_…` fails in argparse), and users paste ids there."""
    while True:
        task_id = base64.urlsafe_b64encode(_POOL.take(TASK_ID_BYTES)).rstrip(b"=").decode("ascii")
        if not task_id.startswith("-"):
            return task_id


PROGRESS_META_KEY = "aml-mcp/progress"
"""Where a task's structured progress travels, in its `_meta`: `{"done": n, "total": m}`."""


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a task's body got: `done` of `total` (`None` when the body cannot tell).

    Advisory and monotonic in nothing: a body may count cases, then queries. Both are finite
    numbers, never negative (`progress_of` builds one from what a body reported)."""

    done: float
    total: float | None = None

    def wire(self) -> dict[str, Any]:
        """`{"done": n, "total": m}` (`total` left out when unknown), integral values as integers."""
        shown: dict[str, Any] = {"done": _number(self.done)}
        if self.total is not None:
            shown["total"] = _number(self.total)
        return shown

    @classmethod
    def from_wire(cls, value: Any) -> Progress | None:
        """The progress a stored document names, or `None` for anything else."""
        if not isinstance(value, dict):
            return None
        return progress_of(value.get("done"), value.get("total"))


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


MAX_PROGRESS_VALUE = 1e15
"""Larger counts are clipped: JSON readers lose integer precision past 2**53."""


def progress_of(done: Any, total: Any = None) -> Progress | None:
    """A `Progress` of what a body reported, or `None` when `done` is not a finite number: negative
    values become 0, huge ones are clipped, and a `total` that is not a positive finite number is unknown."""

    def finite(value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = float(value)
        if number != number or number in (float("inf"), float("-inf")):
            return None
        return min(max(number, 0.0), MAX_PROGRESS_VALUE)

    amount = finite(done)
    if amount is None:
        return None
    whole = finite(total)
    return Progress(amount, whole if whole else None)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a task ended: exactly one of `result` (completed) or `error` (failed), or neither (cancelled)."""

    status: TaskStatus
    message: str | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not self.status.terminal:
            raise ValueError("an outcome is a terminal status")
        if (self.status is TaskStatus.COMPLETED) != (self.result is not None):
            raise ValueError("a completed task, and only it, carries a result")
        if (self.status is TaskStatus.FAILED) != (self.error is not None):
            raise ValueError("a failed task, and only it, carries an error")


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskRecord:
    """One task as stored. `version` increases with every real change (compare-and-set)."""

    task_id: str
    owner: Owner
    tool: str
    scope: str | None
    """The scope the creating tool required; every later `tasks/*` call must still hold it."""
    arguments: dict[str, Any]
    """Kept so an idempotent task can be re-run after a crash; never logged or audited."""
    client_capabilities: dict[str, Any]
    status: TaskStatus
    status_message: str | None = None
    progress: Progress | None = None
    """The body's last structured progress (`_meta["aml-mcp/progress"]`), kept with the task so
    every replica answers it."""
    input_requests: dict[str, Any] = field(default_factory=dict)
    """Outstanding server-to-client requests, by key."""
    input_responses: dict[str, Any] = field(default_factory=dict)
    """Answers received, by key (including those gathered before the task was created)."""
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    cancel_requested: bool = False
    created_at: int
    updated_at: int
    ttl_ms: int
    expires_at: int
    version: int = 1
    lease_holder: str | None = None
    lease_expires_at: int | None = None
    attempts: int = 0
    """Runs started, the first one included."""
    handovers: int = 0
    """Runs that ended because their runner stopped gracefully and handed the lease back; they do
    not count against `max_attempts`, which is for crashes."""

    @property
    def counted_attempts(self) -> int:
        """Runs that count against `max_attempts`: every run started, less those a graceful stop
        handed back (the run about to start after a claim included)."""
        return self.attempts - self.handovers

    @property
    def terminal(self) -> bool:
        return self.status.terminal

    def asked(self, key: str) -> bool:
        """Whether `key` was ever used in this task (keys are unique over a task's life)."""
        return key in self.input_requests or key in self.input_responses
