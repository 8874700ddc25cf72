"""Liveness and readiness probes."""

from __future__ import annotations

import httpx


def test_health_and_readiness(core: httpx.Client) -> None:
    assert core.get("/healthz").json() == {"status": "ok"}
    assert core.get("/readyz").json() == {"status": "ready"}
