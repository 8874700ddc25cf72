"""Clocks a test moves by hand, for the parts that take one (key caches, token caches, tasks)."""

from __future__ import annotations

import time


class ManualClock:
    """Seconds since the epoch, as a callable (`clock()`), that only moves when a test sets `now`."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class OffsetClock:
    """The tasks `Clock` (`now_ms()`): the real time plus an offset a test can `advance`.

    Time keeps flowing as usual (leases, heartbeats), but a test can jump past a TTL at once.
    """

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def advance(self, ms: int) -> None:
        self.offset_ms += ms
