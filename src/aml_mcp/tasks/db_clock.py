"""Task time from the database's clock, so processes on several hosts agree on leases and expiry.

Leases, expiry and `createdAt` are epoch milliseconds compared across processes. On one host every
process reads the same clock; across hosts, a worker whose clock runs 5 s fast would take over a
lease that is still live, and a task could be expired on one replica and alive on another.

`DatabaseClock` reads `clock_timestamp()` from the shared database at start and every few
seconds, and in between adds the time elapsed on a local monotonic counter. Every process thus
reads the database's time, to within half a round trip plus the drift of a few seconds: far below
the lease (seconds). Its `now_ms()` stays synchronous and cheap, as the `Clock` protocol wants, and
the `TaskStore` protocol keeps taking `now_ms` from its caller, so tests still move time by hand.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio

logger = logging.getLogger(__name__)


def _monotonic_ms() -> float:
    return time.monotonic_ns() / 1_000_000


class DatabaseClock:
    """A `Clock` that reads the database's time (see the module docstring).

    `local_ms` is the counter elapsed time is measured on; it only has to advance steadily (its
    origin does not matter). Until the first `sync`, `now_ms` is the local wall clock.
    """

    def __init__(
        self,
        read_database_ms: Callable[[], Awaitable[int]],
        *,
        local_ms: Callable[[], float] = _monotonic_ms,
        refresh_seconds: float = 5.0,
    ) -> None:
        self._read = read_database_ms
        self._local = local_ms
        self._refresh = refresh_seconds
        self._offset: float | None = None
        """Database time minus local time, as of the last `sync`."""

    @property
    def synced(self) -> bool:
        return self._offset is not None

    def now_ms(self) -> int:
        if self._offset is None:
            return time.time_ns() // 1_000_000
        return int(self._local() + self._offset)

    async def sync(self) -> None:
        """Read the database's clock once; the reading is taken as of the round trip's midpoint."""
        before = self._local()
        database = await self._read()
        after = self._local()
        self._offset = database - (before + after) / 2

    async def run(self) -> None:
        """Re-read every `refresh_seconds` until cancelled; a failed reading keeps the last offset."""
        while True:
            await anyio.sleep(self._refresh)
            try:
                await self.sync()
            except Exception as exc:
                logger.warning("could not read the database clock (%s); keeping the last offset", exc)
