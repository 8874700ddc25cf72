"""`/readyz` answers within half a second whatever its probes do (D3, D9), over real HTTP.

Before, the probes ran one after another with no bound: a probe stuck on a database that does not
answer (a pool waiting ten seconds for a connection, a blocking connect in a thread) held
`/readyz` for as long, so the balancer's checks timed out and drained every replica at once, and
a burst of checks ran a round of probes each. Now they run concurrently, each given 300 ms, a
stuck probe keeps running in the background (and is not started again while it runs), and an
answer is reused for 250 ms.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager

import anyio
import anyio.to_thread
import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Route

from aml_mcp.http.health import NotReady, Readiness, ReadinessProbe
from tests.support.live_server import LiveServer


class Probes:
    """Probes a test steers: each counts its runs and does what `behaviour[code]` says."""

    def __init__(self) -> None:
        self.behaviour: dict[str, str] = {}
        self.runs: dict[str, int] = {}

    def probe(self, code: str) -> ReadinessProbe:
        async def run() -> None:
            self.runs[code] = self.runs.get(code, 0) + 1
            what = self.behaviour.get(code, "ok")
            if what == "hang":  # a pool waiting for a connection that never comes
                await anyio.sleep(30)
            elif what == "blocked_thread":  # a blocking connect in a thread (cannot be cancelled) that fails
                await anyio.to_thread.run_sync(time.sleep, 2.5)
                raise NotReady("connection timed out")
            elif what == "slow":
                await anyio.sleep(0.2)
            elif what == "down":
                raise NotReady("the database refused the connection")

        return run


@contextmanager
def serving(readiness: Readiness) -> Iterator[httpx.Client]:
    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with readiness.running():
            yield

    app = Starlette(routes=[Route("/readyz", readiness.endpoint)], lifespan=lifespan)
    with LiveServer(app) as live, httpx.Client(base_url=live.url, timeout=10) as client:
        yield client


def timed_get(client: httpx.Client) -> tuple[float, httpx.Response]:
    started = time.perf_counter()
    response = client.get("/readyz")
    return time.perf_counter() - started, response


@pytest.mark.parametrize("stuck", ["hang", "blocked_thread"])
def test_a_stuck_probe_costs_readyz_at_most_its_deadline_and_names_its_code(stuck: str) -> None:
    probes = Probes()
    probes.behaviour["shared_store_unavailable"] = stuck
    readiness = Readiness(
        [(code, probes.probe(code)) for code in ("shared_store_unavailable", "notes_unavailable")]
    )
    with serving(readiness) as client:
        answers = [timed_get(client) for _ in range(8)]
        for _ in range(5):
            time.sleep(0.3)  # past the cache: each of these checks runs a round
            answers.append(timed_get(client))
    slowest = max(seconds for seconds, _ in answers)
    assert slowest < 0.5, f"/readyz took {slowest * 1000:.0f} ms"
    for _, response in answers:
        assert response.status_code == 503
        assert response.json() == {"status": "not_ready", "reasons": ["shared_store_unavailable"]}
    # The stuck probe was started once and waited for since (2.5 s for the thread: twice at most).
    assert probes.runs["shared_store_unavailable"] <= 2
    assert probes.runs["notes_unavailable"] >= 5


def test_probes_run_concurrently_and_a_burst_of_checks_costs_one_round() -> None:
    probes = Probes()
    codes = ("store_unavailable", "notes_unavailable", "audit_unavailable")
    for code in codes:
        probes.behaviour[code] = "slow"  # 200 ms each: 600 ms one after another
    readiness = Readiness([(code, probes.probe(code)) for code in codes])
    with serving(readiness) as client, ThreadPoolExecutor(20) as pool:
        answers = list(pool.map(lambda _: timed_get(client), range(20)))
    assert all(response.json() == {"status": "ready"} for _, response in answers)
    assert max(seconds for seconds, _ in answers) < 0.5
    assert probes.runs == dict.fromkeys(codes, 1), "twenty checks at once ran one round of probes"


@pytest.mark.anyio
async def test_a_failing_probe_fails_with_its_code_and_recovers_at_the_next_round() -> None:
    probes = Probes()
    probes.behaviour["store_unavailable"] = "down"
    now = [0.0]
    readiness = Readiness([("store_unavailable", probes.probe("store_unavailable"))], clock=lambda: now[0])
    assert await readiness.check() == ["store_unavailable"]
    probes.behaviour["store_unavailable"] = "ok"
    assert await readiness.check() == ["store_unavailable"], "within the cache: the same answer"
    now[0] += 0.3
    assert await readiness.check() == []
    assert probes.runs["store_unavailable"] == 2
