"""Clocks a test moves by hand, for the parts that take one (key caches, token caches, tasks)."""

from __future__ import annotations

import functools
import time

import pytest
from starlette.applications import Starlette

import aml_mcp.app as app_module
from aml_mcp.catalog import Catalog
from aml_mcp.config import Settings
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.wiring import build_tasks


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


def app_with_task_clock(settings: Settings, clock: Clock, *, catalog: Catalog | None = None) -> Starlette:
    """`build_app(settings, catalog=...)` whose Tasks extension reads time from `clock`.

    `build_app` takes no clock, but `build_tasks` does: the composition root's reference to it is
    swapped for one with the clock bound while the app is built (tasks only ever read that clock).
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app_module, "build_tasks", functools.partial(build_tasks, clock=clock))
        return app_module.build_app(settings, catalog=catalog)
