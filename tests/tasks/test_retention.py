"""Retention: TTL from creation (per tool, default, capped), expiry hides a task, the sweeper deletes it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aml_mcp.tasks.retention import Sweeper
from aml_mcp.tasks.service import CancelVerdict
from aml_mcp.tasks.settings import TaskSettings
from tests.support.clocks import OffsetClock
from tests.tasks.factories import owner
from tests.tasks.harness import FAST, harness

pytestmark = pytest.mark.anyio

ALICE = owner()


def test_ttl_is_the_tools_own_or_the_default_and_never_above_the_maximum() -> None:
    settings = TaskSettings(default_ttl_ms=1000, max_ttl_ms=5000)
    assert settings.ttl_for(None) == 1000
    assert settings.ttl_for(3000) == 3000
    assert settings.ttl_for(10**12) == 5000


def test_settings_refuse_inconsistent_values() -> None:
    with pytest.raises(ValueError, match="heartbeat"):
        TaskSettings(lease_ms=1000, heartbeat_ms=1000)
    with pytest.raises(ValueError, match="default_ttl_ms"):
        TaskSettings(default_ttl_ms=10, max_ttl_ms=5)


async def test_ttl_runs_from_creation_and_polls_do_not_extend_it(tmp_path: Path) -> None:
    settings = FAST.model_copy(update={"max_ttl_ms": 50_000, "default_ttl_ms": 40_000})
    clock = OffsetClock()  # moved forward below instead of waiting the TTL out
    async with harness(tmp_path / "db", settings, clock=clock) as h:
        short = await h.start("short_lived", ALICE, {"text": "x"})
        capped = await h.start("long_lived", ALICE, {"text": "x"})
        default = await h.start("echo", ALICE, {"text": "x"})
        assert short.ttl_ms == 1000 and short.expires_at == short.created_at + 1000
        assert capped.ttl_ms == 50_000 and default.ttl_ms == 40_000
        for task in (short, capped, default):  # nothing running while time jumps (leases would lapse)
            await h.settled(task)
        while clock.now_ms() < short.created_at + 900:
            polled = await h.service.get(short.task_id, ALICE)
            assert polled is not None and polled.expires_at == short.created_at + 1000
            clock.advance(50)
        clock.advance(max(0, short.expires_at - clock.now_ms()) + 10)
        assert await h.service.get(short.task_id, ALICE) is None
        assert await h.service.cancel(short.task_id, ALICE) is CancelVerdict.NOT_FOUND


class _Later:
    """A clock `ahead_ms` in the future, so expiry can be tested without waiting for it."""

    def __init__(self, ahead_ms: int) -> None:
        self.ahead_ms = ahead_ms

    def now_ms(self) -> int:
        return int(time.time() * 1000) + self.ahead_ms


async def test_the_sweeper_deletes_expired_rows_only(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        short = await h.start("short_lived", ALICE, {"text": "x"})
        kept = await h.start("echo", ALICE, {"text": "x"})
        await h.settled(short)
        await h.settled(kept)
        assert await Sweeper(h.store, _Later(0), 1000).sweep_once() == 0
        assert await Sweeper(h.store, _Later(1500), 1000, batch=1).sweep_once() == 1
        ids = await h.database.read(lambda c: c.execute("SELECT task_id FROM tasks").fetchall())
        assert [row[0] for row in ids] == [kept.task_id]


async def test_the_sweeper_keeps_expired_rows_the_create_window_still_counts(tmp_path: Path) -> None:
    async with harness(tmp_path / "db") as h:
        short = await h.start("short_lived", ALICE, {"text": "x"})  # a TTL of 1 s, shorter than the window
        await h.settled(short)
        later = _Later(1500)
        assert await Sweeper(h.store, later, 1000, keep_created_within_ms=3000).sweep_once() == 0
        assert await h.store.find(short.task_id, ALICE, later.now_ms()) is None  # expired: invisible
        rows = await h.database.read(lambda c: c.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
        assert rows == 1  # but still stored: the create window counts it
        assert await Sweeper(h.store, _Later(3500), 1000, keep_created_within_ms=3000).sweep_once() == 1
