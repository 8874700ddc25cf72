"""Waiting for something another thread, task or process does: one helper instead of hand-written loops.

`eventually(probe)` calls `probe()` until it succeeds and returns what it returned. Success is a
truthy value or, with `until=`, a value `until` accepts. When `timeout` runs out the test fails
with an `AssertionError` naming what was awaited and the last value seen. An exception from the
probe (an assertion inside it included) is never retried: it fails the test at once, as it would
have without the wait.

    task = eventually(lambda: get(client, task_id), until=lambda t: t["status"] == "completed")
    eventually(lambda: handler.open_streams == before, what="the stream to close")
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

T = TypeVar("T")


def _accepted(value: Any, until: Callable[[Any], Any] | None) -> bool:
    return bool(until(value) if until is not None else value)


def _failure(what: str | None, timeout: float, last: Any) -> AssertionError:
    return AssertionError(f"{what or 'condition'} not reached within {timeout:g} s (last value: {last!r})")


def eventually(
    probe: Callable[[], T],
    until: Callable[[T], Any] | None = None,
    *,
    timeout: float = 5.0,
    interval: float = 0.01,
    what: str | None = None,
) -> T:
    """`probe()`'s first successful value, polling every `interval` seconds for up to `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if _accepted(value, until):
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, timeout, value)
        time.sleep(interval)


async def eventually_async(
    probe: Callable[[], Awaitable[T]],
    until: Callable[[T], Any] | None = None,
    *,
    within: float = 5.0,
    interval: float = 0.01,
    what: str | None = None,
) -> T:
    """`eventually` for async probes (`within` is its timeout), sleeping with `anyio` so the loop runs."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if _accepted(value, until):
            return value
        if time.monotonic() >= deadline:
            raise _failure(what, within, value)
        await anyio.sleep(interval)
