"""The `aml_tasks_created` signal: wakes idle workers when a task is left for any runner to claim.

Each signal makes every idle worker claim, and one claim takes every waiting task, so under load one
signal per `CREATED_SIGNAL_SPACING_SECONDS` serves as well as one per create. The signal rides on a
create's own statement (`pg_notify` in it, sent at its commit) whenever one is due, and costs no
statement of its own; creates committed while none was due are announced by the next create that
carries one, or, if none comes within the spacing, by a signal sent alone.

PostgreSQL serializes every NOTIFYing commit of the whole server through its WAL flush (a lock held
until the commit record is on disk): spaced, a replica's creates take that lock at most once per
spacing, and the rest commit as they would without a signal. A signal lost (a crash, a dropped
connection, a refused create that carried it) only delays a start until the workers' claim poll
(`claim_interval_ms`).
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass

from aml_mcp.store.postgres import PostgresDatabase

logger = logging.getLogger(__name__)

CREATED_CHANNEL = "aml_tasks_created"
CREATED_SIGNAL_SPACING_SECONDS = 0.01
"""The least time between two signals of one process (a create alone is signalled at its commit)."""


@dataclass(frozen=True, slots=True)
class Carried:
    """A create that carries the signal: `recorded` creates had committed unannounced before it was sent."""

    recorded: int


class CreatedSignal:
    """When a create carries the signal, and the signal sent alone for creates none announced."""

    def __init__(self, database: PostgresDatabase) -> None:
        self._db = database
        self.channel = database.channel(CREATED_CHANNEL)
        self._last = -math.inf
        """Event-loop time the last signal was sent (carried or alone)."""
        self._recorded = 0
        """Creates that committed without carrying the signal, so far."""
        self._announced = 0
        """Of those, how many a signal committed after them has announced."""
        self._sending: asyncio.Task[None] | None = None

    def due(self) -> Carried | None:
        """For a create of a task left for any runner, about to be sent: whether it carries the signal."""
        now = asyncio.get_running_loop().time()
        if now - self._last < CREATED_SIGNAL_SPACING_SECONDS:
            return None
        self._last = now
        return Carried(self._recorded)

    def committed(self, carried: Carried | None) -> None:
        """The create committed. Carrying the signal, it announced every create recorded before it was
        sent (they committed before it did); else it is announced by the next signal."""
        if carried is not None:
            self._announced = max(self._announced, carried.recorded)
            return
        self._recorded += 1
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send_owed())

    async def _send_owed(self) -> None:
        """A signal alone for creates still unannounced when the spacing allows one."""
        loop = asyncio.get_running_loop()
        while self._announced < self._recorded:
            await asyncio.sleep(max(0.0, self._last + CREATED_SIGNAL_SPACING_SECONDS - loop.time()))
            if self._announced >= self._recorded:
                return  # a create carried it meanwhile
            if loop.time() - self._last < CREATED_SIGNAL_SPACING_SECONDS:
                continue  # one was carried meanwhile, but sent before the last of these committed
            recorded, self._last = self._recorded, loop.time()
            try:
                await self._db.execute("SELECT pg_notify(%s, '')", (self.channel,))
            except Exception as exc:  # the claim poll is the backstop
                logger.debug("could not signal created tasks (%s); workers claim them at their poll", exc)
                return
            self._announced = max(self._announced, recorded)
