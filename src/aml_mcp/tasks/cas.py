"""Read, decide, compare-and-set, retry: the one way task state is changed.

Decisions are pure functions of the current record (see `inputs`), so when a concurrent writer
moves the version first, the decision is simply taken again on the fresh record. Nothing is
ever written from a stale view.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aml_mcp.principal import Owner
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.store import Change, TaskStore

MAX_ROUNDS = 50


class Contended(RuntimeError):
    """The task kept changing under us; in practice only under a pathological storm of writers."""


@dataclass(frozen=True, slots=True)
class Applied:
    """The record the decision was taken on, and whether a change was written."""

    task: TaskRecord
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
) -> Applied | None:
    """Apply `decide(task)` to the live task; `None` when there is no such task for `owner`.

    A terminal task is returned unchanged without calling `decide` (it can never change). With
    `holder`, a task whose lease another runner took is treated as gone for this runner.
    `lease_free(task)`, when given and true, makes the write conditional on nobody holding a lease.
    """
    for _ in range(MAX_ROUNDS):
        task = await store.find(task_id, owner, clock.now_ms())
        if task is None or (holder is not None and task.lease_holder != holder and not task.terminal):
            return None
        if task.terminal:
            return Applied(task, changed=False)
        change = decide(task)
        if change is None:
            return Applied(task, changed=False)
        free = lease_free(task) if lease_free is not None else False
        if await store.transition(
            task_id,
            owner,
            expected_version=task.version,
            change=change,
            now_ms=clock.now_ms(),
            holder=holder,
            lease_free=free,
        ):
            return Applied(task, changed=True)
    raise Contended(f"task state kept changing during {MAX_ROUNDS} attempts")
