"""Decide, compare-and-set, retry: the one way task state is changed.

Decisions are pure functions of the current record (see `inputs`), so when a concurrent writer
moves the version first, the decision is simply taken again on a freshly read record. Nothing
is ever written from a stale view: a caller that believes it knows the current record may skip
the first read, and if it was wrong the compare-and-set fails and the loop reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aml_mcp.principal import Owner
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.storage import Change, TaskStore

MAX_ROUNDS = 50


class Contended(RuntimeError):
    """The task kept changing under us; in practice only under a pathological storm of writers."""


@dataclass(frozen=True, slots=True)
class Applied:
    """The record the decision was taken on, the record as it now is, and whether it changed."""

    seen: TaskRecord
    current: TaskRecord
    changed: bool


Decide = Callable[[TaskRecord], "Change | None"]


async def apply_change(
    store: TaskStore,
    clock: Clock,
    task_id: str,
    owner: Owner,
    decide: Decide,
    *,
    holder: str | None = None,
    lease_free: Callable[[TaskRecord], bool] | None = None,
    known: TaskRecord | None = None,
) -> Applied | None:
    """Apply `decide(task)` to the live task; `None` when there is no such task for `owner`.

    A terminal task is returned unchanged without calling `decide` (it can never change). With
    `holder`, a task whose lease another runner took is treated as gone for this runner.
    `lease_free(task)`, when given and true, makes the write conditional on nobody holding a lease.
    `known` is the caller's belief about the current record, tried before reading the store.
    """
    for _ in range(MAX_ROUNDS):
        task = known if known is not None else await store.find(task_id, owner, clock.now_ms())
        trusted = known is None
        known = None
        if task is None or (holder is not None and task.lease_holder != holder and not task.terminal):
            if trusted:
                return None
            continue
        if task.terminal:
            if trusted:
                return Applied(task, task, changed=False)
            continue
        change = decide(task)
        if change is None:
            if trusted:
                return Applied(task, task, changed=False)
            continue
        free = lease_free(task) if lease_free is not None else False
        updated = await store.transition(
            task_id,
            owner,
            expected_version=task.version,
            change=change,
            now_ms=clock.now_ms(),
            holder=holder,
            lease_free=free,
        )
        if updated is not None:
            return Applied(task, updated, changed=True)
    raise Contended(f"task state kept changing during {MAX_ROUNDS} attempts")
