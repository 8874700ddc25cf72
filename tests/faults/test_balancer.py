"""The balancer's health checks never drain every replica over slow checks, and when no replica
is up it answers a JSON-RPC error with `Retry-After`, never an HTML page (D3).

Before, `deploy/haproxy.cfg.template` checked `/readyz` every second with no `timeout check` (so
the check's time limit was the 1 s interval) and `fall 2`: on a loaded host, where every replica's
`/readyz` took over a second for a while, HAProxy marked all of them down at once, and clients got
HAProxy's HTML `503 No server is available` without `Retry-After`. Now `/readyz` answers within
500 ms, the check may take 2 s, a replica leaves after 3 failed checks in a row, and the
balancer's own 502/503/504 are JSON-RPC errors.

Real HAProxy processes: in front of stand-in replicas whose `/readyz` is slow for a while, and in
front of a real `aml-mcp cluster` (on a private PostgreSQL) whose replicas are all stopped.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from aml_mcp.cli.cluster import TEMPLATE, free_port, haproxy_config, running_cluster
from tests.support.live_server import LiveServer
from tests.support.private_postgres import PrivatePostgres
from tests.support.waiting import eventually

HAPROXY = shutil.which("haproxy")


def rendered(port: int, replicas: list[int]) -> str:
    return haproxy_config(TEMPLATE.read_text(), port=port, replicas=replicas)


def test_the_rendered_template_bounds_each_check_and_needs_three_failures_in_a_row(tmp_path: Path) -> None:
    config = rendered(8080, [9001, 9002])
    assert "timeout check 2s" in config
    assert "default-server inter 1s fall 3 rise 2 check" in config
    for status in (502, 503, 504):
        line = next(line for line in config.splitlines() if f"http-error status {status} " in line)
        assert "content-type application/json" in line and "hdr Retry-After " in line
        assert '{"jsonrpc":"2.0","id":null,"error":{"code":-32603,' in line and '"retryable":true' in line
    assert HAPROXY is not None, "HAProxy is not installed (Debian: apt-get install haproxy)"
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    checked = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@contextmanager
def balancer(tmp_path: Path, replicas: list[int]) -> Iterator[str]:
    """HAProxy with the rendered template in front of `replicas`; its base URL."""
    assert HAPROXY is not None, "HAProxy is not installed (Debian: apt-get install haproxy)"
    port = free_port()
    path = tmp_path / "haproxy.cfg"
    path.write_text(rendered(port, replicas))
    log = (tmp_path / "haproxy.log").open("wb")
    proc = subprocess.Popen([HAPROXY, "-f", str(path), "-db"], stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        eventually(lambda: _answers(url), timeout=10, what="haproxy to listen")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _answers(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=1)
    except httpx.HTTPError:
        return False
    return True


class StandIn:
    """A replica's stand-in: `/readyz` answers ready, after `slow_seconds` while told to be slow."""

    def __init__(self) -> None:
        self.slow_seconds = 0.0
        self.checks = 0

    async def readyz(self, request: Request) -> JSONResponse:
        self.checks += 1
        if self.slow_seconds:
            await anyio.sleep(self.slow_seconds)
        return JSONResponse({"status": "ready"})

    async def mcp(self, request: Request) -> JSONResponse:
        return JSONResponse({"jsonrpc": "2.0", "id": 1, "result": {}})

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/readyz", self.readyz), Route("/mcp", self.mcp, methods=["POST"])])


@pytest.mark.scaleout
def test_slow_checks_on_every_replica_at_once_take_none_of_them_out(tmp_path: Path) -> None:
    stand_ins = [StandIn(), StandIn()]
    with ExitStack() as stack:
        ports = [stack.enter_context(LiveServer(s.app())).port for s in stand_ins]
        url = stack.enter_context(balancer(tmp_path, ports))
        eventually(lambda: all(s.checks >= 2 for s in stand_ins), timeout=10, what="checks to run")
        # A loaded host: every replica's /readyz takes 1.2 s (within the new 500 ms bound it never
        # would, but a stalled host can), for about six checks in a row.
        statuses: list[int] = []
        stop = threading.Event()

        def call() -> None:
            with httpx.Client(base_url=url, timeout=10) as client:
                while not stop.is_set():
                    statuses.append(client.post("/mcp", json={}).status_code)
                    time.sleep(0.1)

        caller = threading.Thread(target=call)
        caller.start()
        for stand_in in stand_ins:
            stand_in.slow_seconds = 1.2
        time.sleep(6)
        for stand_in in stand_ins:
            stand_in.slow_seconds = 0.0
        time.sleep(1)
        stop.set()
        caller.join()
    assert statuses and set(statuses) == {200}, f"answers while the checks were slow: {sorted(set(statuses))}"


@pytest.mark.faults
@pytest.mark.scaleout
def test_with_every_replica_stopped_the_balancer_answers_a_retryable_json_rpc_error(
    private_postgres: PrivatePostgres, tmp_path: Path
) -> None:
    with running_cluster(
        replicas=2, workers=0, database_url=private_postgres.url, catalog="conformance", work_dir=tmp_path
    ) as cluster:
        for _, replica in cluster.replicas:
            replica.terminate()
        for _, replica in cluster.replicas:
            replica.wait(30)
        with httpx.Client(timeout=10) as client:
            for path, method in (("/mcp", "POST"), ("/readyz", "GET")):
                response = client.request(method, cluster.url.replace("/mcp", path), json={})
                assert response.status_code == 503, response.text
                assert response.headers["content-type"] == "application/json"
                assert int(response.headers["retry-after"]) >= 1
                body = response.json()
                assert body["jsonrpc"] == "2.0" and body["id"] is None
                assert body["error"]["code"] == -32603 and body["error"]["data"]["retryable"] is True
