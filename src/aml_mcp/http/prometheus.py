"""`/metrics` in the Prometheus text format, on a `CollectorRegistry` the composition root builds.

What an operator of several replicas needs to see: MCP requests by method and outcome (from the
`Mcp-Method` header every 2026-07-28 request carries, bounded to the methods the server knows),
tasks by state, how long new tasks wait before a runner claims them and how many lapsed leases are
taken over, how long task store operations take, open listen streams, and the event bus's
reconnects and resyncs, readiness by reason code. Values that live elsewhere (stream counts, bus
counters, task counts in the database, the readiness probes) are read when scraped.

`metrics_app` serves them on a listener of its own (`metrics_port`, loopback by default), never on
the public port: the names of tools and the volume of work per method are not for the internet,
and behind a balancer on the same machine every request's peer is loopback, so only a port the
balancer never forwards to keeps them in. No metric carries a tenant, subject or client label.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aml_mcp.http.guard import HostOriginGuard, default_hosts
from aml_mcp.http.health import Readiness
from aml_mcp.http.limits import HeaderLimits

KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "completion/complete",
        "logging/setLevel",
        "subscriptions/listen",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)
"""Methods counted under their own name; anything else is `other`, so a client cannot grow the label set."""
CLAIM_LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
STORE_OPERATIONS = frozenset(
    {"create", "find", "scope_of", "transition", "renew", "release", "abandon", "claim", "sweep"}
)

TaskCounts = Callable[[], Awaitable[Mapping[str, int]]]
"""Tasks by status right now (read from the store when scraped)."""


def outcome_of(status: int) -> str:
    if status < 400:
        return "ok"
    return "client_error" if status < 500 else "server_error"


class ServerMetrics:
    """The metrics of one process, registered on `registry` (never the library's global one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "aml_mcp_requests",
            "MCP requests answered, by JSON-RPC method and HTTP outcome",
            ("method", "outcome"),
            registry=registry,
        )
        self.claim_lag = Histogram(
            "aml_mcp_task_claim_lag_seconds",
            "From a task's creation to its first claim by a runner (tasks left for workers)",
            buckets=CLAIM_LAG_BUCKETS,
            registry=registry,
        )
        self.takeovers = Counter(
            "aml_mcp_task_lease_takeovers",
            "Tasks claimed after their holder's lease lapsed (a runner died or stalled)",
            registry=registry,
        )
        self.store_latency = Histogram(
            "aml_mcp_task_store_seconds",
            "Duration of task store operations (SQLite or PostgreSQL), by operation",
            ("operation",),
            buckets=STORE_BUCKETS,
            registry=registry,
        )
        self.tasks = Gauge("aml_mcp_tasks", "Tasks in the store by status", ("status",), registry=registry)
        self._task_counts: TaskCounts | None = None
        self._refreshes: list[Callable[[], Awaitable[object]]] = []

    def claimed(self, created_at_ms: int, attempts: int, now_ms: int) -> None:
        """A runner claimed a task: its first run (claim lag) or a takeover."""
        if attempts <= 1:
            self.claim_lag.observe(max(0, now_ms - created_at_ms) / 1000)
        else:
            self.takeovers.inc()

    def store_operation(self, operation: str, seconds: float) -> None:
        """A task store operation ended (`TimedTaskStore` calls this)."""
        label = operation if operation in STORE_OPERATIONS else "other"
        self.store_latency.labels(operation=label).observe(seconds)

    def count_tasks_with(self, counts: TaskCounts) -> None:
        self._task_counts = counts

    def gauge(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A value read from its owner at every scrape."""
        Gauge(name, documentation, registry=self.registry).set_function(read)

    def counters(self, read: Callable[[], Mapping[str, tuple[str, float]]]) -> None:
        """Counters owned elsewhere (name → (help, value)), read at every scrape."""
        self.registry.register(_ReadCounters(read))

    def watch_readiness(self, readiness: Readiness) -> None:
        """`aml_mcp_ready` (1 or 0) and `aml_mcp_not_ready{reason}` (1 per failing probe, a series per
        reason code), from the probes run afresh at every scrape: alerts need no `/readyz` poller."""
        ready = Gauge("aml_mcp_ready", "1 when every readiness probe passes", registry=self.registry)
        not_ready = Gauge(
            "aml_mcp_not_ready",
            "1 for each readiness probe failing, by reason code (the reason itself is in the log)",
            ("reason",),
            registry=self.registry,
        )

        async def refresh() -> None:
            failing = await readiness.check()
            ready.set(0 if failing else 1)
            for code in readiness.reasons:
                not_ready.labels(reason=code).set(1 if code in failing else 0)

        self._refreshes.append(refresh)

    async def render(self) -> bytes:
        for refresh in self._refreshes:
            await refresh()
        if self._task_counts is not None:
            counts = await self._task_counts()
            for status in ("working", "input_required", "completed", "failed", "cancelled"):
                self.tasks.labels(status=status).set(counts.get(status, 0))
        return generate_latest(self.registry)


class _ReadCounters(Collector):
    def __init__(self, read: Callable[[], Mapping[str, tuple[str, float]]]) -> None:
        self._read = read

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        for name, (documentation, value) in self._read().items():
            yield CounterMetricFamily(name, documentation, value=value)


class CountRequests:
    """ASGI middleware for `/mcp`: one count per answered request, by method and outcome."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self._app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") != "/mcp" or scope.get("method") != "POST":
            await self._app(scope, receive, send)
            return
        method = "other"
        for key, value in scope.get("headers", ()):
            if key == b"mcp-method":
                name = value.decode("latin-1")
                method = name if name in KNOWN_METHODS else "other"
                break
        counted = False

        async def counting_send(message: Message) -> None:
            nonlocal counted
            if message["type"] == "http.response.start" and not counted:
                counted = True
                self._metrics.requests.labels(method=method, outcome=outcome_of(int(message["status"]))).inc()
            await send(message)

        await self._app(scope, receive, counting_send)


def metrics_endpoint(metrics: ServerMetrics) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return endpoint


def metrics_app(
    metrics: ServerMetrics,
    *,
    host: str,
    allowed_hosts: Sequence[str] | None,
    max_header_count: int,
    max_header_bytes: int,
) -> Starlette:
    """The app of the metrics listener bound to `host`: `GET /metrics` and nothing else, behind the
    public app's header limits and its DNS-rebinding guard (a web page whose name resolves to this
    machine must not read the metrics on a loopback port either): the `Host` must be loopback,
    `host` or one of `allowed_hosts`, and no browser `Origin` is accepted. `allowed_hosts` None: no
    guard (`dns_rebinding_protection` off)."""
    middleware = [Middleware(HeaderLimits, max_count=max_header_count, max_bytes=max_header_bytes)]
    if allowed_hosts is not None:
        name = f"[{host}]" if ":" in host else host
        hosts = [*default_hosts(""), name, f"{name}:*", *allowed_hosts]
        middleware.append(Middleware(HostOriginGuard, hosts=hosts, origins=()))
    routes = [Route("/metrics", metrics_endpoint(metrics), methods=["GET"])]
    return Starlette(routes=routes, middleware=middleware)
