"""`/metrics` lives on a listener of its own, never on the public port (review finding N3).

Behind a balancer on the same machine every request's TCP peer is loopback, so the old "loopback
clients only" check let anyone who reached the balancer read the metrics. Now the public app has
no `/metrics` route at all, and `--metrics-port` starts a second listener (loopback by default, off
unless asked) in the same process, serving the same registry and nothing else. Everything here runs
the real `aml-mcp serve` (and `aml-mcp worker`, on PostgreSQL) in a child process over real HTTP.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from tests.http.announced import METRICS, AnnouncedServer
from tests.support.mcp_http import message, post
from tests.support.postgres import scratch_schema
from tests.support.waiting import eventually

SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def listening(pid: int) -> dict[int, str]:
    """Port -> bound address of every TCP socket process `pid` listens on."""
    sockets = psutil.Process(pid).net_connections(kind="tcp")
    return {s.laddr.port: s.laddr.ip for s in sockets if s.status == psutil.CONN_LISTEN}


def test_metrics_are_served_on_their_own_loopback_listener_and_not_on_the_public_port(tmp_path: Path) -> None:
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--metrics-port", "0"]
    server = AnnouncedServer(args, env=SMALL_DEMO).start()
    try:
        assert server.metrics is not None and server.proc is not None
        metrics_port = httpx.URL(server.metrics).port
        public_port = httpx.URL(server.base).port
        assert metrics_port and metrics_port != public_port
        assert listening(server.proc.pid) == {public_port: "127.0.0.1", metrics_port: "127.0.0.1"}

        with httpx.Client(base_url=server.base, timeout=10) as public:
            for path in ("/metrics", "/metrics/", "/metrics?format=text"):
                refused = public.get(path)
                assert refused.status_code == 404, (path, refused.text)
                assert "aml_mcp_" not in refused.text
            assert post(public, message("tools/list")).status_code == 401  # counted by the listener
            assert public.get("/readyz").json() == {"status": "ready"}

        with httpx.Client(timeout=10) as scraper:
            scraped = scraper.get(server.metrics)
            assert scraped.status_code == 200
            assert scraped.headers["content-type"].startswith("text/plain")
            found = samples(scraped.text)
            # The same process's registry: the request to the public port is counted here.
            assert (
                found[("aml_mcp_requests_total", (("method", "tools/list"), ("outcome", "client_error")))]
                == 1
            )
            assert found[("aml_mcp_ready", ())] == 1
            assert found[("aml_mcp_not_ready", (("reason", "notes_unavailable"),))] == 0
            assert ("aml_mcp_reembedding_banks_left", ()) in found
            # The listener serves /metrics and nothing else.
            listener = server.metrics.removesuffix("/metrics")
            for path in ("/mcp", "/readyz", "/healthz", "/lab", "/oauth/authorize"):
                assert scraper.get(f"{listener}{path}").status_code == 404, path
            # A page whose name resolves to this machine cannot read it (DNS rebinding).
            assert scraper.get(server.metrics, headers={"Host": "evil.example"}).status_code == 421
            assert scraper.get(server.metrics, headers={"Origin": "http://evil.example"}).status_code == 403
    finally:
        status = server.stop(signal.SIGTERM)
    assert status == 0, server.stderr()
    assert "aml-mcp stopped (SIGTERM)" in server.stderr()
    assert "Traceback" not in server.stderr()


def test_scrapes_that_wait_for_the_shared_pool_all_answer(tmp_path: Path) -> None:
    """On PostgreSQL each scrape reads the task counts through the app's own pool (4 connections).
    Twenty-four scrapes at once, beside readiness probes on the public port, make them queue for a
    connection: the pool's lock then belongs to the loop that waits on it, so a listener on any
    other loop would answer 500 ("bound to a different event loop"). All of them answer 200."""
    with scratch_schema() as (url, schema):
        env = {**SMALL_DEMO, "AML_MCP_DATABASE_URL": url, "AML_MCP_DATABASE_SCHEMA": schema}
        args = ["serve", "--data-dir", str(tmp_path / "data"), "--metrics-port", "0"]
        server = AnnouncedServer(args, env=env).start()
        try:
            assert server.metrics is not None
            metrics = server.metrics
            with httpx.Client(timeout=30, limits=httpx.Limits(max_connections=32)) as client:

                def scrape(n: int) -> int:
                    if n % 4 == 3:
                        return client.get(f"{server.base}/readyz").status_code
                    response = client.get(metrics)
                    has_counts = ("aml_mcp_tasks", (("status", "working"),)) in samples(response.text)
                    return response.status_code if has_counts else -response.status_code

                with ThreadPoolExecutor(max_workers=24) as pool:
                    answers = list(pool.map(scrape, range(240)))
            assert answers == [200] * 240, sorted(set(answers))
        finally:
            status = server.stop(signal.SIGTERM)
        assert status == 0, server.stderr()
        assert "Traceback" not in server.stderr() and "different event loop" not in server.stderr()


def test_without_a_metrics_port_there_is_no_metrics_listener(tmp_path: Path) -> None:
    with AnnouncedServer(["serve", "--data-dir", str(tmp_path / "data")], env=SMALL_DEMO) as server:
        assert server.metrics is None and server.proc is not None
        assert list(listening(server.proc.pid)) == [httpx.URL(server.base).port]
        assert httpx.get(f"{server.base}/metrics", timeout=10).status_code == 404
        assert "metrics (" not in server.stderr()  # no listener announced


def test_a_worker_without_a_health_port_serves_its_metrics_listener(tmp_path: Path) -> None:
    """A worker answers no requests; with `--metrics-port` alone it still has its claim lag and task
    counts scraped, and a stop signal ends the listener with the lifetime."""
    with scratch_schema() as (url, schema):
        args = [sys.executable, "-m", "aml_mcp", "worker", "--catalog", "conformance", "--database-url", url]
        args += ["--data-dir", str(tmp_path / "worker"), "--metrics-port", "0"]
        with tempfile.TemporaryFile() as stderr:
            env = {**os.environ, "AML_MCP_DATABASE_SCHEMA": schema}
            proc = subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
            )

            def said() -> str:
                stderr.seek(0)
                return stderr.read().decode(errors="replace")

            try:
                announced = eventually(
                    lambda: METRICS.search(said()) if "running task bodies" in said() else None,
                    timeout=120,
                    interval=0.05,
                    what="the worker's metrics listener",
                )
                scraped = httpx.get(announced.group(1), timeout=10)
                assert scraped.status_code == 200
                found = samples(scraped.text)
                assert found[("aml_mcp_ready", ())] == 1
                assert found[("aml_mcp_tasks", (("status", "working"),))] == 0
                assert list(listening(proc.pid)) == [httpx.URL(announced.group(1)).port]  # nothing else
            finally:
                proc.send_signal(signal.SIGTERM)
                status = proc.wait(30)
            assert status == 0, said()
            assert "aml-mcp worker stopped (SIGTERM)" in said() and "Traceback" not in said()
