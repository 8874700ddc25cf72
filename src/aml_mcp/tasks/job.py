"""The in-process handle on one running task body: how to stop it, wake it, and lend its slot.

Slots come from the runner's `FairScheduler`, counted against the task owner's tenant and principal.

A job is stopped by cancelling its own cancel scope, so the body sees an ordinary cancellation
at its next await — promptly, and without the body having to poll anything. The reason is
kept so the runner knows afterwards whether to record `cancelled` (the client asked) or to
write nothing at all (the lease was lost, or the server is shutting down).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from enum import StrEnum
from types import TracebackType

import anyio

from aml_mcp.tasks.model import Outcome, Progress, TaskRecord
from aml_mcp.tasks.scheduler import FairScheduler, Share


class StopReason(StrEnum):
    CANCEL = "cancel"
    """The client cancelled: the runner records `cancelled`."""
    LOST = "lost"
    """Another runner holds the task now, or it expired or ended elsewhere: write nothing."""
    SHUTDOWN = "shutdown"
    """This process is stopping: write nothing; the lease is released for the next runner."""


class Slot:
    """One of the runner's run slots for one owner, lent back while the body waits for input."""

    def __init__(self, scheduler: FairScheduler, share: Share) -> None:
        self._scheduler = scheduler
        self._share = share
        self._held = False

    async def __aenter__(self) -> Slot:
        await self._scheduler.acquire(self._share)
        self._held = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._held:
            self._held = False
            self._scheduler.release(self._share)

    @contextlib.asynccontextmanager
    async def lent(self) -> AsyncIterator[None]:
        """Give the slot to another task for the duration (a body waiting for a human holds nothing)."""
        if self._held:
            self._held = False
            self._scheduler.release(self._share)
        try:
            yield
        finally:
            # If cancelled here, nothing is held and nothing is released.
            await self._scheduler.acquire(self._share)
            self._held = True


class Job:
    def __init__(self, task: TaskRecord, scheduler: FairScheduler) -> None:
        self.task = task
        self.scope = anyio.CancelScope()
        self.slot = Slot(scheduler, Share.of(task.owner))
        self.stop_reason: StopReason | None = None
        self._wake = anyio.Event()
        self.ended = anyio.Event()
        """Set once identical jobs following this one's run may stop waiting for it."""
        self.shared: Outcome | None = None
        """Its run's outcome when followers may take it: completed, with no answer asked for."""
        self.progress: Progress | None = None
        """The structured progress the body reported last and the throttle had not written yet when
        it ended: written with the outcome."""

    def share(self, outcome: Outcome | None) -> None:
        """Followers take `outcome`, or (`None`) run themselves; only the first call counts."""
        if not self.ended.is_set():
            self.shared = outcome
            self.ended.set()

    def stop(self, reason: StopReason) -> None:
        """Cancel the body (the first reason given wins)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.scope.cancel()

    def arm(self) -> anyio.Event:
        """A fresh wake-up to wait on; armed *before* re-reading the store, so no poke is missed."""
        self._wake = anyio.Event()
        return self._wake

    def poke(self) -> None:
        self._wake.set()
