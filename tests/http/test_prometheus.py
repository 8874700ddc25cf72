"""`/metrics`: Prometheus text from the app's own registry, counting what was really served, on the
metrics listener's app (`app.state.metrics_app`), never on the public app.

In-process here (the listener over real HTTP: `test_metrics_listener.py`): the metrics app is
driven on the app's own event loop, as `serve` runs it.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.asgi import InProcessServer
from tests.support.mcp_http import call_tool, create, get, message, post
from tests.support.settings import open_settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(server: InProcessServer, path: str = "/metrics", **headers: str) -> httpx.Response:
    """A GET to the server's metrics app, on the app's event loop."""
    app = server.app.state.metrics_app

    async def fetch() -> httpx.Response:
        transport = httpx.ASGITransport(app, client=("127.0.0.1", 50_001))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9464") as client:
            response = await client.get(path, headers=headers)
            await response.aread()
            return response

    return server.run(fetch)


def test_requests_are_counted_by_method_and_outcome(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        client = httpx.Client(transport=server.transport, base_url=server.url)
        for _ in range(3):
            assert post(client, message("tools/list")).status_code == 200
        assert call_tool(client, "slow_compute", {"seconds": 0}, capabilities={}).status_code == 200
        assert post(client, message("no/such-method")).status_code in (200, 400, 404)
        response = scrape(server)
        assert client.get("/metrics").status_code == 404  # not on the public app
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    found = samples(response.text)
    assert found[("aml_mcp_requests_total", (("method", "tools/list"), ("outcome", "ok")))] == 3
    assert found[("aml_mcp_requests_total", (("method", "tools/call"), ("outcome", "ok")))] == 1
    assert ("aml_mcp_requests_total", (("method", "no/such-method"), ("outcome", "ok"))) not in found
    assert found[("aml_mcp_listen_streams_open", ())] == 0


def test_two_apps_keep_separate_registries(tmp_path: Path) -> None:
    with (
        InProcessServer(build_app(open_settings(tmp_path / "a"), catalog=fixture_catalog())) as first,
        InProcessServer(build_app(open_settings(tmp_path / "b"), catalog=fixture_catalog())) as second,
    ):
        client = httpx.Client(transport=first.transport, base_url=first.url)
        assert post(client, message("tools/list")).status_code == 200
        text = scrape(second).text
    assert ("aml_mcp_requests_total", (("method", "tools/list"), ("outcome", "ok"))) not in samples(text)


def test_claims_and_takeovers_are_counted(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        metrics = server.app.state.metrics
        metrics.claimed(created_at_ms=1_000, attempts=1, now_ms=1_250)
        metrics.claimed(created_at_ms=1_000, attempts=2, now_ms=9_000)
        found = samples(scrape(server).text)
    assert found[("aml_mcp_task_claim_lag_seconds_count", ())] == 1
    assert found[("aml_mcp_task_claim_lag_seconds_sum", ())] == 0.25
    assert found[("aml_mcp_task_lease_takeovers_total", ())] == 1


def test_the_metrics_app_serves_metrics_only_and_to_this_machines_names(tmp_path: Path) -> None:
    settings = open_settings(tmp_path, metrics_host="127.0.0.1", allowed_hosts=["scraper.internal:*"])
    with InProcessServer(build_app(settings, catalog=fixture_catalog())) as server:
        assert scrape(server, host="localhost:9464").status_code == 200
        assert scrape(server, host="scraper.internal:9464").status_code == 200
        assert scrape(server, host="evil.example:9464").status_code == 421
        assert scrape(server, origin="http://evil.example").status_code == 403
        for path in ("/mcp", "/readyz", "/healthz"):
            assert scrape(server, path).status_code == 404, path


def test_readiness_is_in_the_metrics_by_reason_code(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        found = samples(scrape(server).text)
    assert found[("aml_mcp_ready", ())] == 1
    assert found[("aml_mcp_not_ready", (("reason", "store_unavailable"),))] == 0
    assert found[("aml_mcp_not_ready", (("reason", "audit_unavailable"),))] == 0


def test_task_store_operations_are_timed_by_operation(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        client = httpx.Client(transport=server.transport, base_url=server.url)
        before = samples(scrape(server).text)
        task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
        for _ in range(3):
            assert get(client, task_id)["taskId"] == task_id
        found = samples(scrape(server).text)

    def count(operation: str, seen: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
        return seen.get(("aml_mcp_task_store_seconds_count", (("operation", operation),)), 0.0)

    assert count("create", found) - count("create", before) == 1
    assert count("find", found) - count("find", before) >= 3
    assert found[("aml_mcp_task_store_seconds_sum", (("operation", "create"),))] > 0
    infinite = found[("aml_mcp_task_store_seconds_bucket", (("le", "+Inf"), ("operation", "create")))]
    assert infinite == count("create", found)
