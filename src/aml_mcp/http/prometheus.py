"""`/metrics` in the Prometheus text format, on a `CollectorRegistry` the composition root builds.

What an operator of several replicas needs to see: MCP requests by method and outcome (from the
`Mcp-Method` header every 2026-07-28 request carries, bounded to the methods the server knows),
tasks by state, how long new tasks wait before a runner claims them and how many lapsed leases are
taken over, how long task store operations take, open listen streams, and the event bus's
reconnects and resyncs. Values that live elsewhere (stream counts, bus counters, task counts in
the database) are read when scraped.

`/metrics` answers loopback clients only unless `metrics_remote` is set: the names of tools and
the volume of work per method are not for the internet (put the scraper next to the process, or
behind the balancer's own access rules).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping

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
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aml_mcp.loopback import is_loopback_host

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

    async def render(self) -> bytes:
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


def metrics_endpoint(metrics: ServerMetrics, *, remote: bool) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        client = request.client.host if request.client is not None else None
        if not remote and not is_loopback_host(client):
            return PlainTextResponse("metrics are served to loopback clients only\n", status_code=403)
        return Response(await metrics.render(), media_type=CONTENT_TYPE_LATEST)

    return endpoint
