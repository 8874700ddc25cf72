"""Liveness and readiness for anonymous callers: `/healthz` says the process answers, `/readyz`
whether it can serve, with stable reason codes when it cannot.

Both answer anyone who reaches the port, a balancer's health checks and whoever stands behind
the balancer included, so they say only what an orchestrator acts on: `{"status": "ready"}`, or
HTTP 503 with `{"status": "not_ready", "reasons": [...]}` where each reason is a fixed code
(`store_unavailable`, `notes_unavailable`, ...). What an operator needs to fix it, and work in
progress that does not make the server unready (which bank is being re-embedded, how far), can
name a bank, count its notes or quote an internal error: that goes to the log, once per change
rather than once per probe (a balancer probes every second), and to the metrics listener.

`/readyz` answers within half a second whatever the database does. The probes run concurrently,
each given `probe_seconds` (300 ms): one that has not answered by then fails with its own code,
and keeps running in the background (a probe waiting on a blocking thread cannot be stopped), so
the next check waits for that same run rather than piling another on it. An answer is reused for
`cache_seconds` (250 ms), so a burst of checks — several balancers, an orchestrator, a scrape —
costs one round of probes. Before, the probes ran one after another without a bound, each
waiting up to ten seconds for a pooled connection: while PostgreSQL was down every `/readyz` took
over two seconds, and on a loaded host slow checks made the balancer drain every replica at once.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

import anyio
from anyio.abc import TaskGroup
from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

ReadinessProbe = Callable[[], Awaitable[None]]
"""Raises when the thing it probes cannot serve (`NotReady` when the reason is known)."""

REASON_CODE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
"""What a reason code looks like: a fixed identifier, never data."""

PROBE_SECONDS = 0.3
"""How long one probe may take before it counts as failing (well inside a 500 ms answer)."""
CACHE_SECONDS = 0.25
"""How long an answer is reused: a burst of checks costs one round of probes."""


class NotReady(Exception):
    """A probe's verdict with the reason for the log (one line, e.g. "notes.db is damaged ...:
    restore it from a backup"); it never reaches `/readyz`, which shows only the probe's code."""


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


@dataclass
class _Run:
    """One run of one probe: done once it returned or raised; `failure` is `None` when it passed."""

    done: anyio.Event = field(default_factory=anyio.Event)
    failure: tuple[str, bool] | None = None
    """(why, whether the log line gets the traceback)."""


class Readiness:
    """The probes behind `/readyz`, each under its reason code, and what they said last.

    `check()` returns the codes of the probes failing (or not answering within `probe_seconds`);
    a probe that starts failing, fails for another reason, or recovers is logged once (a failure
    with its reason, or with its traceback when the probe raised something unexpected). Probes run
    in the task group of `running()` (the app's lifetime); a check made outside it runs them in
    its own, cancelling those that overrun. The state changes without an `await` between reading
    and writing it, so overlapping checks never log one change twice.
    """

    def __init__(
        self,
        probes: Sequence[tuple[str, ReadinessProbe]],
        *,
        probe_seconds: float = PROBE_SECONDS,
        cache_seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        codes = [code for code, _ in probes]
        bad = [code for code in codes if not REASON_CODE.match(code)]
        if bad or len(set(codes)) != len(codes):
            raise ValueError(f"readiness reason codes must be distinct identifiers: {codes}")
        self._probes = tuple(probes)
        self._probe_seconds = probe_seconds
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._failing: dict[str, str] = {}
        self._runs: dict[str, _Run] = {}
        """The latest run of each probe (a run not done yet is waited for, never started twice)."""
        self._answer: tuple[float, tuple[str, ...]] | None = None
        self._group: TaskGroup | None = None
        self.rounds = 0
        """Rounds of probes started (a cached answer starts none)."""

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every code this server may report, in probe order (a fixed set: a metric's label values)."""
        return tuple(code for code, _ in self._probes)

    @property
    def failing(self) -> tuple[str, ...]:
        """The codes that failed at the last check, in probe order."""
        return tuple(code for code in self.reasons if code in self._failing)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The app's lifetime: probes that overrun their time finish here, in the background."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                yield
            finally:
                self._group = None
                group.cancel_scope.cancel()

    async def check(self) -> list[str]:
        answer = self._answer
        if answer is not None and self._clock() - answer[0] < self._cache_seconds:
            return list(answer[1])
        if self._group is None:
            async with anyio.create_task_group() as group:
                failing = await self._round(group)
                group.cancel_scope.cancel()  # whatever overran is not waited for
        else:
            failing = await self._round(self._group)
        self._answer = (self._clock(), tuple(failing))
        return failing

    async def _round(self, group: TaskGroup) -> list[str]:
        self.rounds += 1
        runs: list[tuple[str, _Run]] = []
        for code, probe in self._probes:
            run = self._runs.get(code)
            if run is None or run.done.is_set():
                run = self._runs[code] = _Run()
                group.start_soon(self._run, code, probe, run)
            runs.append((code, run))
        with anyio.move_on_after(self._probe_seconds):
            for _, run in runs:
                await run.done.wait()
        failing: list[str] = []
        for code, run in runs:
            if not run.done.is_set():
                self._failed(code, f"no answer within {self._probe_seconds * 1000:.0f} ms", traceback=False)
                failing.append(code)
            elif run.failure is not None:
                failing.append(code)
        return failing

    async def _run(self, code: str, probe: ReadinessProbe, run: _Run) -> None:
        run.failure = ("cancelled", False)  # until it returns: a run cut short never counts as passed
        try:
            await probe()
        except NotReady as exc:
            run.failure = (str(exc), False)
            self._failed(code, str(exc), traceback=False)
        except Exception as exc:
            run.failure = (f"{type(exc).__name__}: {exc}", True)
            self._failed(code, run.failure[0], traceback=True)
        else:
            run.failure = None
            self._passed(code)
        finally:
            run.done.set()

    def _failed(self, code: str, why: str, *, traceback: bool) -> None:
        if self._failing.get(code) == why:
            return
        self._failing[code] = why
        logger.warning("not ready (%s): %s", code, why, exc_info=traceback)

    def _passed(self, code: str) -> None:
        if self._failing.pop(code, None) is not None:
            logger.info("ready again: %s cleared", code)

    async def endpoint(self, request: Request) -> JSONResponse:
        failing = await self.check()
        headers = {"Cache-Control": "no-store"}
        if failing:
            return JSONResponse({"status": "not_ready", "reasons": failing}, status_code=503, headers=headers)
        return JSONResponse({"status": "ready"}, headers=headers)
