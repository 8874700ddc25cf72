"""Retention: a task lives `ttlMs` from its creation — polls never extend it — then it is gone.

Expiry itself needs no background work: every store query ignores expired rows, so an expired
task is unknown to everyone the moment its time is up. The sweeper only reclaims the space, and
leaves the rows the create-rate window still counts.
"""

from __future__ import annotations

import logging

import anyio

from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.storage import TaskStore

logger = logging.getLogger(__name__)

SWEEP_BATCH = 500


class Sweeper:
    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        interval_ms: int,
        batch: int = SWEEP_BATCH,
        *,
        keep_created_within_ms: int = 0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._interval_s = interval_ms / 1000
        self._batch = batch
        self._keep_ms = keep_created_within_ms

    async def sweep_once(self) -> int:
        """Delete every task expired by now, in batches so no one write holds the database long.

        A task created within the last `keep_created_within_ms` stays even if expired (a short TTL):
        the create-rate window counts the rows themselves, so sweeping them would reopen it.
        """
        total = 0
        while True:
            now = self._clock.now_ms()
            keep = now - self._keep_ms if self._keep_ms > 0 else None
            removed = await self._store.sweep(now, self._batch, keep)
            total += removed
            if removed < self._batch:
                return total

    async def run(self) -> None:
        """Sweep forever, every interval (cancel to stop)."""
        while True:
            try:
                removed = await self.sweep_once()
                if removed:
                    logger.info("deleted %d expired tasks", removed)
            except Exception:
                logger.exception("expired-task sweep failed")
            await anyio.sleep(self._interval_s)
