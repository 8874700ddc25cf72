"""Liveness and readiness: `/healthz` says the process answers, `/readyz` that its store does too."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from starlette.requests import Request
from starlette.responses import JSONResponse

logger = logging.getLogger(__name__)

ReadinessProbe = Callable[[], Awaitable[None]]
"""Raises when the thing it probes is unreachable."""


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"status": "ok"})


def readyz(probes: Sequence[tuple[str, ReadinessProbe]]) -> Callable[[Request], Awaitable[JSONResponse]]:
    async def endpoint(request: Request) -> JSONResponse:
        failing: list[str] = []
        for name, probe in probes:
            try:
                await probe()
            except Exception:
                logger.warning("readiness probe %s failed", name, exc_info=True)
                failing.append(name)
        if failing:
            return JSONResponse({"status": "unavailable", "failing": failing}, status_code=503)
        return JSONResponse({"status": "ready"})

    return endpoint
