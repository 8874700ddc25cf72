"""Liveness and readiness for anonymous callers: `/healthz` says the process answers, `/readyz`
whether it can serve, with stable reason codes when it cannot.

Both answer anyone who reaches the port, a balancer's health checks and whoever stands behind
the balancer included, so they say only what an orchestrator acts on: `{"status": "ready"}`, or
HTTP 503 with `{"status": "not_ready", "reasons": [...]}` where each reason is a fixed code
(`store_unavailable`, `notes_unavailable`, ...). What an operator needs to fix it, and work in
progress that does not make the server unready (which bank is being re-embedded, how far), can
name a bank, count its notes or quote an internal error: that goes to the log, once per change
rather than once per probe (a balancer probes every second), and to the metrics listener.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

ReadinessProbe = Callable[[], Awaitable[None]]
"""Raises when the thing it probes cannot serve (`NotReady` when the reason is known)."""

REASON_CODE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
"""What a reason code looks like: a fixed identifier, never data."""


class NotReady(Exception):
    """A probe's verdict with the reason for the log (one line, e.g. "notes.db is damaged ...:
    restore it from a backup"); it never reaches `/readyz`, which shows only the probe's code."""


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


class Readiness:
    """The probes behind `/readyz`, each under its reason code, and what they said last.

    `check()` runs every probe and returns the codes of those failing; a probe that starts failing,
    fails for another reason, or recovers is logged once (a failure with its reason, or with its
    traceback when the probe raised something unexpected). The state changes without an `await`
    between reading and writing it, so overlapping checks never log one change twice.
    """

    def __init__(self, probes: Sequence[tuple[str, ReadinessProbe]]) -> None:
        codes = [code for code, _ in probes]
        bad = [code for code in codes if not REASON_CODE.match(code)]
        if bad or len(set(codes)) != len(codes):
            raise ValueError(f"readiness reason codes must be distinct identifiers: {codes}")
        self._probes = tuple(probes)
        self._failing: dict[str, str] = {}

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every code this server may report, in probe order (a fixed set: a metric's label values)."""
        return tuple(code for code, _ in self._probes)

    @property
    def failing(self) -> tuple[str, ...]:
        """The codes that failed at the last check, in probe order."""
        return tuple(code for code in self.reasons if code in self._failing)

    async def check(self) -> list[str]:
        failing: list[str] = []
        for code, probe in self._probes:
            try:
                await probe()
            except NotReady as exc:
                self._failed(code, str(exc), traceback=False)
                failing.append(code)
            except Exception as exc:
                self._failed(code, f"{type(exc).__name__}: {exc}", traceback=True)
                failing.append(code)
            else:
                self._passed(code)
        return failing

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
        if failing:
            return JSONResponse({"status": "not_ready", "reasons": failing}, status_code=503)
        return JSONResponse({"status": "ready"})
