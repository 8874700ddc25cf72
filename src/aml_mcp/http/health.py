"""Liveness and readiness: `/healthz` says the process answers, `/readyz` that its store does too."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

ReadinessProbe = Callable[[], Awaitable[None]]
"""Raises when the thing it probes is unreachable (`NotReady` when the reason may be shown)."""


class NotReady(Exception):
    """A probe's verdict whose message is safe to publish on `/readyz` (no paths, no secrets).

    Operators and orchestrators read the reason to know what to fix (for example "notes.db is
    damaged ...: restore it from a backup"); any other exception is only named, and logged.
    """


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def readyz(
    probes: Sequence[tuple[str, ReadinessProbe]],
    details: Sequence[tuple[str, Callable[[], str | None]]] = (),
) -> Callable[[Request], Awaitable[JSONResponse]]:
    """`details` are facts worth showing that do not make the server unready (work in progress)."""

    async def endpoint(request: Request) -> JSONResponse:
        failing: list[str] = []
        reasons: dict[str, str] = {}
        for name, probe in probes:
            try:
                await probe()
            except NotReady as exc:
                logger.warning("readiness probe %s: %s", name, exc)
                failing.append(name)
                reasons[name] = str(exc)
            except Exception:
                logger.warning("readiness probe %s failed", name, exc_info=True)
                failing.append(name)
        if failing:
            body: dict[str, object] = {"status": "unavailable", "failing": failing}
            if reasons:
                body["reasons"] = reasons
            return JSONResponse(body, status_code=503)
        ready: dict[str, object] = {"status": "ready"}
        notes = {name: text for name, detail in details if (text := detail()) is not None}
        if notes:
            ready["detail"] = notes
        return JSONResponse(ready)

    return endpoint
