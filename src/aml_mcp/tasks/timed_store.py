"""Store latency: a `TaskStore` that reports how long each operation of the store it wraps took.

Why at this seam: every task operation of every caller, runner and sweeper passes through the
`TaskStore` protocol, on SQLite and on PostgreSQL alike, so one wrapper measures both backends the
same way, and the stores keep only their SQL. A failed operation (`StorageUnavailable`, a quota
refusal) is measured too: a slow outage is exactly what an operator needs to see.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import TypeVar

from aml_mcp.principal import Owner
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.store import Change, LeaseReport, TaskQuota, TaskStore

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

    async def create(self, task: TaskRecord, quota: TaskQuota | None = None) -> None:
        await self._timed("create", self._inner.create(task, quota))

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

    async def sweep(self, now_ms: int, limit: int) -> int:
        return await self._timed("sweep", self._inner.sweep(now_ms, limit))
