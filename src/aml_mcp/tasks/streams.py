"""Tasks as listen streams see them: which ids a caller may follow, and a change feed for the bus.

`PublishingTaskStore` wraps any `TaskStore`: after a committed change a client can see — of status,
of the input requests an `input_required` task shows, or of progress (the status message and
`_meta["aml-mcp/progress"]`, which the runner writes at most every `tasks.progress_interval_ms`) — it
publishes the task's complete state — what `tasks/get` would answer at that moment — with its owner
and scope, so each stream can check the event against its own credential before sending it.
"""

from __future__ import annotations

from collections.abc import Collection

from aml_mcp.principal import Owner, Principal
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.subscriptions.events import TaskChanged
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.storage import Change, LeaseReport, TaskQuota, TaskStore
from aml_mcp.tasks.wire import detailed_task


def changed_event(task: TaskRecord, poll_interval_ms: int) -> TaskChanged:
    """The bus event for a committed change: the task's complete state, with its owner and scope."""
    return TaskChanged(
        owner=task.owner,
        task_id=task.task_id,
        scope=task.scope,
        state=detailed_task(task, poll_interval_ms),
        version=task.version,
    )


class PublishingTaskStore:
    """A `TaskStore` that tells the event bus about every committed change a client can see."""

    def __init__(self, inner: TaskStore, bus: EventBus, clock: Clock, poll_interval_ms: int) -> None:
        self._inner = inner
        self._bus = bus
        self._clock = clock
        self._poll_interval_ms = poll_interval_ms

    async def create(
        self, task: TaskRecord, quota: TaskQuota | None = None, *, idempotency_key: str | None = None
    ) -> TaskRecord:
        return await self._inner.create(task, quota, idempotency_key=idempotency_key)

    async def find(self, task_id: str, owner: Owner, now_ms: int) -> TaskRecord | None:
        return await self._inner.find(task_id, owner, now_ms)

    async def scope_of(self, task_id: str, owner: Owner, now_ms: int) -> str | None:
        return await self._inner.scope_of(task_id, owner, now_ms)

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
        updated = await self._inner.transition(
            task_id,
            owner,
            expected_version=expected_version,
            change=change,
            now_ms=now_ms,
            holder=holder,
            lease_free=lease_free,
        )
        if updated is not None and change.visible:
            self._bus.publish(changed_event(updated, self._poll_interval_ms))
        return updated

    async def renew(
        self, holder: str, lease_until_ms: int, now_ms: int, task_ids: Collection[str] | None = None
    ) -> LeaseReport:
        return await self._inner.renew(holder, lease_until_ms, now_ms, task_ids)

    async def release(self, holder: str, handed_over: Collection[str] | None = None) -> None:
        await self._inner.release(holder, handed_over)

    async def abandon(self, task_id: str, holder: str) -> None:
        await self._inner.abandon(task_id, holder)

    async def claim(
        self,
        holder: str,
        now_ms: int,
        lease_until_ms: int,
        limit: int,
        exclude: Collection[str] = (),
    ) -> list[TaskRecord]:
        return await self._inner.claim(holder, now_ms, lease_until_ms, limit, exclude)

    async def sweep(self, now_ms: int, limit: int, keep_created_after_ms: int | None = None) -> int:
        return await self._inner.sweep(now_ms, limit, keep_created_after_ms)


class FollowableTasks:
    """`TaskLookup` for listen streams, with the owner rule of `tasks/get`."""

    def __init__(self, store: TaskStore, clock: Clock, poll_interval_ms: int) -> None:
        self._store = store
        self._clock = clock
        self._poll_interval_ms = poll_interval_ms

    async def followable(self, task_id: str, principal: Principal) -> frozenset[str] | None:
        task = await self._store.find(task_id, principal.owner, self._clock.now_ms())
        if task is None:
            return None
        return frozenset({task.scope}) if task.scope else frozenset()

    async def scopes_to_follow(self, task_id: str, principal: Principal) -> frozenset[str]:
        """The scope following this task needs; none for an unknown, foreign or expired id."""
        scope = await self._store.scope_of(task_id, principal.owner, self._clock.now_ms())
        return frozenset({scope}) if scope else frozenset()

    async def snapshot(self, task_id: str, principal: Principal) -> TaskChanged | None:
        return await self.changed(task_id, principal.owner)

    async def changed(self, task_id: str, owner: Owner) -> TaskChanged | None:
        """The task's current state as a bus event, looked up by id and owner; `None` if not found.

        What a cross-process bus publishes locally when another process announced a change."""
        task = await self._store.find(task_id, owner, self._clock.now_ms())
        return changed_event(task, self._poll_interval_ms) if task is not None else None
