"""The composition root: `build_app(settings)` wires every part of the server together.

This is the only place that constructs long-lived collaborators — the audit log, the event bus,
the complete scope rules, the development issuer — and hands each component what it needs;
components never reach for each other. Where state lives is decided once, before anything else,
by the persistence object (`persistence.py`: the data directory, or the PostgreSQL database
replicas share); every store comes from it. Every component has one shape (`Component`: routes,
scope rules, `running()`), so the lifespan only loops over them.

The order below is the dependency order: the catalog and the Tasks extension state which scopes
their methods need, so the rules are complete before the auth gate that enforces them is built;
the gate in turn gives listen streams what they re-check on every event.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

from aml_mcp.aml.wiring import build_aml
from aml_mcp.audit.storage import AuditReader
from aml_mcp.audit.wiring import AuditTrail, build_audit
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.wiring import Auth, LocalIssuer, build_auth
from aml_mcp.catalog import Catalog
from aml_mcp.component import Component, Parts
from aml_mcp.config import Settings
from aml_mcp.devauth.storage import DevClient
from aml_mcp.devauth.users import DEMO_USERS
from aml_mcp.devauth.wiring import DevAuth, build_dev_auth
from aml_mcp.http.availability import RefuseWhileUnavailable
from aml_mcp.http.endpoint import Admission, McpEndpoint
from aml_mcp.http.guard import HostOriginGuard, default_hosts, default_origins
from aml_mcp.http.health import NotReady, Readiness, ReadinessProbe, healthz
from aml_mcp.http.limits import HeaderLimits
from aml_mcp.http.prometheus import CountRequests, ServerMetrics, metrics_app
from aml_mcp.lab.exchange import InProcessMcp
from aml_mcp.lab.simulation import MintToken, Simulation
from aml_mcp.lab.wiring import DemoAccount, build_lab, lab_scope_rules, page_url
from aml_mcp.persistence import Hooks, Persistence, open_persistence
from aml_mcp.protocol.server import build_server
from aml_mcp.scope_rules import ScopeRules, StaticScopeRule
from aml_mcp.server_record import ServerRecord
from aml_mcp.subscriptions.bus import EventBus
from aml_mcp.subscriptions.events import AccessChanged, ListChanged
from aml_mcp.subscriptions.followed import FollowedTasks
from aml_mcp.subscriptions.listen import ListenHandler, ListenParams, listen_scope_rule
from aml_mcp.subscriptions.policy import CredentialPolicy
from aml_mcp.subscriptions.rates import ListenRateAdmission, ListenRates
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.wiring import Tasks, build_tasks

logger = logging.getLogger(__name__)


@dataclass
class Runtime:
    """Handles the process entry point needs on a running app (kept on `app.state.runtime`)."""

    shutdown_hooks: list[Callable[[], None]] = field(default_factory=list)

    def begin_shutdown(self) -> None:
        """Called as soon as a stop signal arrives, before the HTTP server waits for open requests."""
        for hook in self.shutdown_hooks:
            try:
                hook()
            except Exception:
                logger.exception("shutdown hook raised")


def build_app(settings: Settings, *, catalog: Catalog | None = None, clock: Clock | None = None) -> Starlette:
    """Build the ASGI application described by `settings`, serving `catalog` (default: the AML tools).

    `clock` is the time the Tasks extension reads (creation, expiry, leases); default the store's.
    """
    persistence = open_persistence(settings)
    runtime, metrics = Runtime(), ServerMetrics(CollectorRegistry())
    audit = _audit_trail(settings, persistence)
    # Entered in this order, left in reverse: the audit trail outlives everything that records into it.
    components: list[Component] = [audit]
    probes = persistence.probes()
    if catalog is None:
        catalog = _aml_catalog(settings, persistence, components, probes, metrics)
    tools = catalog.tools
    configured = settings.auth.scope_hierarchy
    hierarchy = ScopeHierarchy(configured if configured is not None else catalog.scope_hierarchy)
    tasks = _tasks(settings, persistence, catalog, audit, metrics, clock)
    followed = FollowedTasks()
    bus = persistence.event_bus(tasks=tasks.following, followed=followed)
    # Per caller, so only with authentication on (off, every request is the one local caller).
    listen_rates = ListenRates(settings.listen) if settings.auth.enabled else None
    scope_rules = ScopeRules(
        {"tools/call": StaticScopeRule(tools.scope_needed)},
        tasks.scope_rules,
        {"subscriptions/listen": listen_scope_rule(tasks.following, listen_rates)},
        lab_scope_rules(settings.lab) if settings.lab_served else {},
    )
    dev = _dev_issuer(settings, persistence, hierarchy)
    auth = build_auth(
        settings.auth,
        resource_url=settings.resource_url,
        revocation_store=persistence.revocations(),
        audit=audit.log.record,
        scope_rules=scope_rules,
        hierarchy=hierarchy,
        default_scopes=lambda: tools.scopes,
        local_issuers=[LocalIssuer(dev.issuer, dev.fetch_jwks)] if dev is not None else [],
    )
    if dev is not None:
        components.append(dev)
        # Access tokens of a grant family a replay revoked are refused through this shared list.
        dev.revoke_into(auth.revocations)
    components.append(auth)
    listen = _listen_handler(settings, catalog, bus, auth, tasks, followed, listen_rates)
    runtime.shutdown_hooks.append(listen.close_all)
    metrics.gauge(
        "aml_mcp_listen_streams_open", "Open subscriptions/listen streams", lambda: listen.open_streams
    )
    persistence.connect(
        Hooks(
            runner=tasks.runner if tasks.runs_bodies else None,
            revocations=auth.revocations,
            resync=[listen.resync],
            counters=metrics.counters,
            count_tasks=metrics.count_tasks_with,
        )
    )
    server = build_server(
        catalog=catalog,
        list_ttl_ms=settings.list_ttl_ms,
        cache_scope=auth.cache_scope,
        request_state_keys=[persistence.secrets().secret("request-state")],
        tasks=tasks.handlers,
        extensions=tasks.extensions,
    )
    server.add_request_handler("subscriptions/listen", ListenParams, listen)
    tasks.register(server)
    components.append(tasks)
    admission: Admission = auth.admission
    if listen_rates is not None:
        admission = ListenRateAdmission(admission, listen_rates, audit=audit.log.record)
    if not settings.auth.audit_fail_open:
        # A decision that cannot be recorded is not made: 503 and not ready until the trail writes again.
        admission = RefuseWhileUnavailable(admission, audit.log.unavailable_reason)
        probes.append(("audit_unavailable", audit.log.ready))
    endpoint = _mcp_endpoint(settings, server, admission, audit, components)
    if settings.lab_served:
        components.append(
            _lab(settings, admission, endpoint, persistence.audit_reader(), audit, dev, hierarchy)
        )
    # For the commands that act for this server (`aml-mcp token`, `aml-mcp revoke`): see server_record.
    record = ServerRecord(settings.resource_url, tuple(auth.trusted_issuers))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with persistence.running(), contextlib.AsyncExitStack() as stack:
            record.write(persistence.data_dir)
            for component in components:
                await stack.enter_async_context(component.running())
            yield
            runtime.begin_shutdown()

    app = _asgi_app(settings, lifespan, endpoint, probes, components, metrics)
    app.state.runtime = runtime
    app.state.listen = listen
    app.state.mcp_server = server  # what the isolation tests enumerate: every method it serves
    app.state.audit = audit.log
    return app


def _aml_catalog(
    settings: Settings,
    persistence: Persistence,
    components: list[Component],
    probes: list[tuple[str, ReadinessProbe]],
    metrics: ServerMetrics,
) -> Catalog:
    """The AML tools on the persistence object's notes and baselines, as a component with its
    readiness probe and re-embedding gauges."""
    notes = persistence.notes()
    aml = build_aml(
        settings.aml,
        notes=notes.notes,
        identifiers=notes.identifiers,
        baselines=persistence.baselines(),
        start_notes=notes.start,
    )
    components.append(aml)
    probes.append(("notes_unavailable", _reporting(aml.notes_problem)))
    for name, documentation, read in aml.progress_gauges():
        metrics.gauge(name, documentation, read)
    return aml.catalog


def _tasks(
    settings: Settings,
    persistence: Persistence,
    catalog: Catalog,
    audit: AuditTrail,
    metrics: ServerMetrics,
    clock: Clock | None,
) -> Tasks:
    """The Tasks extension on the persistence object's task store; an API-only replica (`role =
    "api"`) leaves the bodies to workers."""
    storage = persistence.tasks(
        poll_interval_ms=settings.tasks.poll_interval_ms, clock=clock, observe=metrics.store_operation
    )
    return build_tasks(
        settings.tasks,
        store=storage.store,
        clock=storage.clock,
        database_clock=storage.database_clock,
        tools=catalog.tools,
        audit=audit.log.record,
        run_bodies=settings.role == "all",
        on_claimed=lambda task, now: metrics.claimed(task.created_at, task.attempts, now),
    )


def _audit_trail(settings: Settings, persistence: Persistence) -> AuditTrail:
    """The audit log: the persistence object's table, the JSON-lines file and the logger as set."""
    auth = settings.auth
    return build_audit(
        persistence.audit_table(),
        data_dir=persistence.data_dir,
        to_file=auth.audit_file,
        to_log=auth.audit_to_log,
        file_max_bytes=auth.audit_file_max_bytes,
        file_backups=auth.audit_file_backups,
        anonymous_window_seconds=auth.audit_anonymous_window_seconds,
        anonymous_max_distinct=auth.audit_anonymous_max_distinct,
        flush_seconds=auth.audit_flush_seconds,
    )


def _dev_issuer(settings: Settings, persistence: Persistence, hierarchy: ScopeHierarchy) -> DevAuth | None:
    """The development authorization server, when authentication and it are on; it pre-registers
    the lab's page as a client when the lab is served."""
    if not (settings.auth.enabled and settings.auth.dev.enabled):
        return None
    page_client = DevClient(
        client_id=settings.lab.client_id,
        redirect_uris=(page_url(settings.resource_url),),
        client_name="aml-mcp lab (web page)",
    )
    state = persistence.devauth(replay_memory_seconds=settings.auth.dev.refresh_token_ttl_seconds)
    return build_dev_auth(
        settings.auth.dev,
        store=state.store,
        keys=state.keys,
        secrets=persistence.secrets(),
        resource_url=settings.resource_url,
        tenant_claim=settings.auth.tenant_claim,
        hierarchy=hierarchy,
        preregistered=[page_client] if settings.lab_served else [],
        token_leeway_seconds=settings.auth.leeway_seconds,
    )


def _listen_handler(
    settings: Settings,
    catalog: Catalog,
    bus: EventBus,
    auth: Auth,
    tasks: Tasks,
    followed: FollowedTasks,
    rates: ListenRates | None,
) -> ListenHandler:
    """`subscriptions/listen`: list changes and task states on `bus`, re-authorized per event."""
    served = {"tools"}
    catalog.tools.changes.add(lambda: bus.publish(ListChanged("tools")))
    if catalog.prompts is not None:
        catalog.prompts.changes.add(lambda: bus.publish(ListChanged("prompts")))
        served.add("prompts")
    if catalog.resources is not None:
        catalog.resources.changes.add(lambda: bus.publish(ListChanged("resources")))
        served.add("resources")
    auth.revocations.changes.add(lambda: bus.publish(AccessChanged()))
    return ListenHandler(
        bus,
        served=frozenset(served),
        policy=CredentialPolicy(revoked=auth.revoked, missing_scopes=auth.missing_scopes),
        resource_exists=catalog.resources.knows if catalog.resources is not None else None,
        tasks=tasks.following,
        max_streams_per_principal=settings.max_listen_streams_per_principal,
        followed=followed,
        catch_up_seconds=settings.listen.catch_up_seconds,
        rates=rates,
    )


def _mcp_endpoint(
    settings: Settings,
    server: Server[Any],
    admission: Admission,
    audit: AuditTrail,
    components: list[Component],
) -> McpEndpoint:
    """`/mcp`: the SDK's stateless entry, JSON for plain requests and SSE when a request streams."""
    plain = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
    streaming = StreamableHTTPSessionManager(app=server, json_response=False, stateless=True)
    components.append(Parts(lifetime=lambda: _both(plain.run(), streaming.run())))
    return McpEndpoint(
        plain=plain,
        streaming=streaming,
        admission=admission,
        max_body_bytes=settings.max_body_bytes,
        max_json_depth=settings.http.max_json_depth,
        audit=audit.log.record,
    )


def _lab(
    settings: Settings,
    admission: Admission,
    endpoint: McpEndpoint,
    trail: AuditReader,
    audit: AuditTrail,
    dev: DevAuth | None,
    hierarchy: ScopeHierarchy,
) -> Component:
    """The lab page; its simulation sends its wrong requests to `endpoint` inside the process. It is
    told what each scope implies, and the development authorization server's demo users (public on
    its sign-in page) when that server is on."""
    simulation = Simulation(
        send=InProcessMcp(endpoint, url=settings.resource_url),
        trail=trail,
        flush_audit=lambda: anyio.to_thread.run_sync(audit.log.flush),
        # Without the development issuer only the request with no token is shown.
        mint=_simulation_minter(dev) if dev is not None and settings.simulation_served else None,
    )
    return build_lab(
        settings.lab,
        admission=admission,
        audit=trail,
        resource_url=settings.resource_url,
        tenant_claim=settings.auth.tenant_claim,
        simulation=simulation if settings.lab.simulation else None,
        scope_implies={scope: sorted(hierarchy.effective([scope])) for scope in hierarchy.scopes},
        demo_users=[
            DemoAccount(user.username, user.tenant, tuple(sorted(user.scopes)), user.description)
            for user in DEMO_USERS
        ]
        if dev is not None
        else [],
    )


def _asgi_app(
    settings: Settings,
    lifespan: Callable[[Starlette], contextlib.AbstractAsyncContextManager[None]],
    endpoint: McpEndpoint,
    probes: list[tuple[str, ReadinessProbe]],
    components: list[Component],
    metrics: ServerMetrics,
) -> Starlette:
    """The Starlette app: `/mcp`, health, readiness and the components' routes behind the header
    limits, the request counter and the Host/Origin guard; `/metrics` on a listener of its own."""
    # Outermost: the header count is checked before anything builds a header mapping.
    http = settings.http
    middleware = [
        Middleware(HeaderLimits, max_count=http.max_header_count, max_bytes=http.max_header_bytes),
        Middleware(CountRequests, metrics=metrics),
    ]
    if settings.dns_rebinding_protection:
        middleware.append(
            Middleware(
                HostOriginGuard,
                hosts=default_hosts(settings.resource_url) + settings.allowed_hosts,
                origins=default_origins(settings.resource_url) + settings.allowed_origins,
            )
        )
    readiness = Readiness(probes)
    components.append(Parts(lifetime=readiness.running))  # probes that overrun finish in its task group
    metrics.watch_readiness(readiness)
    routes: list[BaseRoute] = [
        Route("/mcp", endpoint),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readiness.endpoint, methods=["GET"]),
    ]
    routes += [route for component in components for route in component.routes]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.metrics_app = metrics_app(
        metrics,
        host=settings.metrics_host,
        allowed_hosts=settings.allowed_hosts if settings.dns_rebinding_protection else None,
        max_header_count=http.max_header_count,
        max_header_bytes=http.max_header_bytes,
    )
    return app


def _simulation_minter(dev: DevAuth) -> MintToken:
    """The lab simulation's flawed tokens, signed by the development issuer (they never leave the server)."""

    def mint(
        *,
        subject: str,
        tenant: str,
        client_id: str,
        scopes: Sequence[str],
        audience: str | None,
        ttl_seconds: int,
        claims: Mapping[str, Any],
    ) -> tuple[str, str]:
        minted = dev.minter.mint(
            subject=subject,
            tenant=tenant,
            client_id=client_id,
            scopes=scopes,
            audience=audience,
            ttl_seconds=ttl_seconds,
            extra=claims,
        )
        return minted.token, minted.jti

    return mint


def _reporting(problem: Callable[[], Awaitable[str | None]]) -> ReadinessProbe:
    """A readiness probe that fails with `problem`'s answer (a reason safe to publish) when there is one."""

    async def probe() -> None:
        reason = await problem()
        if reason is not None:
            raise NotReady(reason)

    return probe


@contextlib.asynccontextmanager
async def _both(
    first: contextlib.AbstractAsyncContextManager[None], second: contextlib.AbstractAsyncContextManager[None]
) -> AsyncIterator[None]:
    async with first, second:
        yield
