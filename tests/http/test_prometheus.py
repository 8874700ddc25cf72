"""`/metrics`: Prometheus text from the app's own registry, counting what was really served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from starlette.requests import Request

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from aml_mcp.http.prometheus import ServerMetrics, metrics_endpoint
from tests.support.asgi import InProcessServer
from tests.support.mcp_http import call_tool, create, get, message, post
from tests.support.settings import open_settings


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_requests_are_counted_by_method_and_outcome(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        client = httpx.Client(transport=server.transport, base_url=server.url)
        for _ in range(3):
            assert post(client, message("tools/list")).status_code == 200
        assert call_tool(client, "slow_compute", {"seconds": 0}, capabilities={}).status_code == 200
        assert post(client, message("no/such-method")).status_code in (200, 400, 404)
        response = client.get("/metrics")
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
        other = httpx.Client(transport=second.transport, base_url=second.url)
        text = other.get("/metrics").text
    assert ("aml_mcp_requests_total", (("method", "tools/list"), ("outcome", "ok"))) not in samples(text)


def _request_from(host: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/metrics", "headers": [], "client": (host, 4242)}
    )


def test_metrics_are_for_loopback_clients_unless_allowed() -> None:
    metrics = ServerMetrics(CollectorRegistry())
    metrics.claimed(created_at_ms=1_000, attempts=1, now_ms=1_250)
    metrics.claimed(created_at_ms=1_000, attempts=2, now_ms=9_000)
    closed = metrics_endpoint(metrics, remote=False)
    assert asyncio.run(closed(_request_from("203.0.113.7"))).status_code == 403
    loopback = asyncio.run(closed(_request_from("127.0.0.1")))
    assert loopback.status_code == 200
    found = samples(bytes(loopback.body).decode())
    assert found[("aml_mcp_task_claim_lag_seconds_count", ())] == 1
    assert found[("aml_mcp_task_claim_lag_seconds_sum", ())] == 0.25
    assert found[("aml_mcp_task_lease_takeovers_total", ())] == 1
    opened = metrics_endpoint(metrics, remote=True)
    assert asyncio.run(opened(_request_from("203.0.113.7"))).status_code == 200


def test_task_store_operations_are_timed_by_operation(tmp_path: Path) -> None:
    with InProcessServer(build_app(open_settings(tmp_path), catalog=fixture_catalog())) as server:
        client = httpx.Client(transport=server.transport, base_url=server.url)
        before = samples(client.get("/metrics").text)
        task_id = create(client, "slow_compute", {"seconds": 0})["taskId"]
        for _ in range(3):
            assert get(client, task_id)["taskId"] == task_id
        found = samples(client.get("/metrics").text)

    def count(operation: str, seen: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> float:
        return seen.get(("aml_mcp_task_store_seconds_count", (("operation", operation),)), 0.0)

    assert count("create", found) - count("create", before) == 1
    assert count("find", found) - count("find", before) >= 3
    assert found[("aml_mcp_task_store_seconds_sum", (("operation", "create"),))] > 0
    infinite = found[("aml_mcp_task_store_seconds_bucket", (("le", "+Inf"), ("operation", "create")))]
    assert infinite == count("create", found)
