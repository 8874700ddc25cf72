"""The composition root: `build_app(settings)` wires every part of the server together.

This is the only place that constructs long-lived collaborators — the database, the audit log,
the event bus, the complete scope rules, the development issuer — and hands each component what
it needs; components never reach for each other. Every component has one shape (`Component`:
migrations, routes, scope rules, `running()`), so the lifespan only loops over them.

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
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Route

from aml_mcp.aml.wiring import Aml, build_aml
from aml_mcp.audit.storage import AuditReader
from aml_mcp.audit.storage import postgres as postgres_audit
from aml_mcp.audit.storage.postgres import PostgresAuditReader, PostgresAuditTable
from aml_mcp.audit.storage.sqlite import SqliteAuditReader
from aml_mcp.audit.wiring import build_audit
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.storage import postgres as postgres_revocations
from aml_mcp.auth.storage.postgres import PostgresRevocationStore
from aml_mcp.auth.wiring import LocalIssuer, build_auth
from aml_mcp.catalog import Catalog
from aml_mcp.component import Component, Parts
from aml_mcp.config import Settings
from aml_mcp.devauth.storage import DevClient
from aml_mcp.devauth.wiring import DevAuth, build_dev_auth
from aml_mcp.http.availability import RefuseWhileUnavailable
from aml_mcp.http.endpoint import Admission, McpEndpoint
from aml_mcp.http.guard import HostOriginGuard, default_hosts, default_origins
from aml_mcp.http.health import NotReady, Readiness, ReadinessProbe, healthz
from aml_mcp.http.limits import HeaderLimits
from aml_mcp.http.prometheus import CountRequests, ServerMetrics, metrics_app
from aml_mcp.lab.exchange import InProcessMcp
from aml_mcp.lab.simulation import MintToken, Simulation
from aml_mcp.lab.wiring import build_lab, lab_scope_rules, page_url
from aml_mcp.protocol.server import build_server
from aml_mcp.scope_rules import ScopeRules, StaticScopeRule
from aml_mcp.server_record import ServerRecord
from aml_mcp.shared_secrets.storage import SecretSource
from aml_mcp.shared_secrets.storage.files import FilesSecrets
from aml_mcp.shared_secrets.storage.postgres import PostgresSecrets
from aml_mcp.store.postgres import PoolBudget, PostgresDatabase
from aml_mcp.store.sqlite import Migration, SqliteDatabase
from aml_mcp.subscriptions.bus import EventBus, LocalEventBus
from aml_mcp.subscriptions.events import AccessChanged, ListChanged
from aml_mcp.subscriptions.followed import FollowedTasks
from aml_mcp.subscriptions.listen import ListenHandler, ListenParams, listen_scope_rule
from aml_mcp.subscriptions.policy import CredentialPolicy
from aml_mcp.subscriptions.postgres_bus import PgEventBus
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.storage import postgres as postgres_tasks
from aml_mcp.tasks.storage.postgres import CONTROL_CHANNEL, CREATED_CHANNEL
from aml_mcp.tasks.wiring import build_tasks

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


@contextlib.asynccontextmanager
async def _shared_lifetime(shared: PostgresDatabase, migrations: Sequence[Migration]) -> AsyncIterator[None]:
    """The shared database for the app's lifetime: opened, brought up to date, closed at the end."""
    await shared.open()
    try:
        for migration in migrations:
            await shared.apply(migration)
        yield
    finally:
        await shared.close()


def build_app(settings: Settings, *, catalog: Catalog | None = None, clock: Clock | None = None) -> Starlette:
    """Build the ASGI application described by `settings`, serving `catalog` (default: the AML tools).

    `clock` is the time the Tasks extension reads (creation, expiry, leases); default the system's.
    """
    data_dir = settings.ensure_data_dir()
    runtime = Runtime()
    database = SqliteDatabase(data_dir / "aml-mcp.db")
    shared = (
        PostgresDatabase(
            settings.database_url,
            schema=settings.database_schema,
            budget=PoolBudget(max_size=settings.database_pool_size),
        )
        if settings.database_url is not None
        else None
    )
    local_bus = LocalEventBus() if shared is None else None
    # Replicas on one database share their secrets, so what one seals another opens.
    secret_source: SecretSource = (
        FilesSecrets(data_dir / "keys") if shared is None else PostgresSecrets(shared)
    )
    metrics = ServerMetrics(CollectorRegistry())
    audit = build_audit(
        database,
        data_dir=data_dir,
        to_file=settings.auth.audit_file,
        to_log=settings.auth.audit_to_log,
        file_max_bytes=settings.auth.audit_file_max_bytes,
        file_backups=settings.auth.audit_file_backups,
        anonymous_window_seconds=settings.auth.audit_anonymous_window_seconds,
        anonymous_max_distinct=settings.auth.audit_anonymous_max_distinct,
        flush_seconds=settings.auth.audit_flush_seconds,
        table=(
            PostgresAuditTable(settings.database_url, schema=settings.database_schema)
            if settings.database_url is not None
            else None
        ),
    )
    audit_reader: AuditReader = SqliteAuditReader(database) if shared is None else PostgresAuditReader(shared)
    # Entered in this order, left in reverse: the audit trail outlives everything that records into it.
    components: list[Component] = [audit]
    # Readiness says only these codes; what each failure was is logged (and counted in the metrics).
    probes: list[tuple[str, ReadinessProbe]] = [("store_unavailable", database.ping)]
    if shared is not None:
        probes.append(("shared_store_unavailable", shared.ping))

    aml: Aml | None = None
    if catalog is None:
        aml = build_aml(settings.aml, data_dir=data_dir, database=database, shared=shared)
        catalog = aml.catalog
        components.append(aml)
        probes.append(("notes_unavailable", _reporting(aml.notes_problem)))
        for name, documentation, read in aml.progress_gauges():
            metrics.gauge(name, documentation, read)
    tools = catalog.tools
    configured = settings.auth.scope_hierarchy
    hierarchy = ScopeHierarchy(configured if configured is not None else catalog.scope_hierarchy)

    tasks = build_tasks(
        settings.tasks,
        database=database,
        tools=tools,
        audit=audit.log.record,
        bus=local_bus,
        shared=shared,
        clock=clock,
        run_bodies=settings.role == "all",
        on_claimed=lambda task, now: metrics.claimed(task.created_at, task.attempts, now),
        observe_store=metrics.store_operation,
    )
    followed = FollowedTasks()
    bus: EventBus
    if shared is None:
        assert local_bus is not None
        bus = local_bus
    else:
        # Task changes committed by any process reach this process's streams through the database.
        pg_bus = PgEventBus(shared, resolve=tasks.following.changed, followed=followed)
        bus = pg_bus
        if tasks.runs_bodies:
            # Tasks an API-only replica created wake this runner at once; a resync (reconnect,
            # when signals may have been missed) claims and re-reads its leases too.
            pg_bus.on_signal(CREATED_CHANNEL, lambda _: tasks.runner.wake())
            # Cancellations and answers for a task this runner holds, stored by any process.
            pg_bus.on_signal(CONTROL_CHANNEL, tasks.runner.control_signal)
            pg_bus.on_resync(_waking(tasks.runner.wake, tasks.runner.heartbeat_now))
        metrics.count_tasks_with(lambda: postgres_tasks.count_by_status(shared))
        metrics.counters(
            lambda: {
                "aml_mcp_bus_reconnects": ("Event bus listener reconnects", max(0, pg_bus.connects - 1)),
                "aml_mcp_bus_resyncs": ("Event bus resyncs (streams re-read current state)", pg_bus.resyncs),
                "aml_mcp_bus_notifications": ("Task notifications received", pg_bus.received),
            }
        )
        shared_migrations = [
            *tasks.shared_migrations,
            postgres_revocations.MIGRATION,
            postgres_audit.MIGRATION,
            *(aml.shared_migrations if aml is not None else ()),
        ]
        components.append(Parts(lifetime=lambda: _shared_lifetime(shared, shared_migrations)))
        components.append(Parts(lifetime=pg_bus.running))
    scope_rules = ScopeRules(
        {"tools/call": StaticScopeRule(tools.scope_needed)},
        tasks.scope_rules,
        {"subscriptions/listen": listen_scope_rule(tasks.following)},
        lab_scope_rules(settings.lab) if settings.lab_served else {},
    )

    local_issuers: list[LocalIssuer] = []
    dev: DevAuth | None = None
    if settings.auth.enabled and settings.auth.dev.enabled:
        page_client = DevClient(
            client_id=settings.lab.client_id,
            redirect_uris=(page_url(settings.resource_url),),
            client_name="aml-mcp lab (web page)",
        )
        dev = build_dev_auth(
            settings.auth.dev,
            data_dir=data_dir,
            resource_url=settings.resource_url,
            tenant_claim=settings.auth.tenant_claim,
            hierarchy=hierarchy,
            preregistered=[page_client] if settings.lab_served else [],
            shared=shared,
            token_leeway_seconds=settings.auth.leeway_seconds,
        )
        local_issuers.append(LocalIssuer(dev.issuer, dev.fetch_jwks))
        components.append(dev)
    auth = build_auth(
        settings.auth,
        resource_url=settings.resource_url,
        database=database,
        audit=audit.log.record,
        scope_rules=scope_rules,
        hierarchy=hierarchy,
        default_scopes=lambda: tools.scopes,
        local_issuers=local_issuers,
        revocation_store=PostgresRevocationStore(shared) if shared is not None else None,
    )
    components.append(auth)
    if dev is not None:
        # Access tokens of a grant family a replay revoked are refused through this shared list.
        dev.revoke_into(auth.revocations)
    if shared is not None:
        # A revocation committed by any process is re-read here at once, and after every reconnect
        # (notifications sent while the listener was away are lost; the periodic poll stays the bound).
        pg_bus.on_notify(shared.channel(postgres_revocations.CHANNEL), auth.revocations.refresh)
        pg_bus.on_resync(auth.revocations.refresh)

    tools.changes.add(lambda: bus.publish(ListChanged("tools")))
    served = {"tools"}
    if catalog.prompts is not None:
        catalog.prompts.changes.add(lambda: bus.publish(ListChanged("prompts")))
        served.add("prompts")
    if catalog.resources is not None:
        catalog.resources.changes.add(lambda: bus.publish(ListChanged("resources")))
        served.add("resources")
    auth.revocations.changes.add(lambda: bus.publish(AccessChanged()))
    listen = ListenHandler(
        bus,
        served=frozenset(served),
        policy=CredentialPolicy(revoked=auth.revoked, missing_scopes=auth.missing_scopes),
        resource_exists=catalog.resources.knows if catalog.resources is not None else None,
        tasks=tasks.following,
        max_streams_per_principal=settings.max_listen_streams_per_principal,
        followed=followed,
    )
    runtime.shutdown_hooks.append(listen.close_all)
    metrics.gauge(
        "aml_mcp_listen_streams_open", "Open subscriptions/listen streams", lambda: listen.open_streams
    )
    if shared is not None:
        pg_bus.on_resync(listen.resync)

    server = build_server(
        catalog=catalog,
        list_ttl_ms=settings.list_ttl_ms,
        cache_scope=auth.cache_scope,
        request_state_keys=[secret_source.secret("request-state")],
        tasks=tasks.handlers,
        extensions=tasks.extensions,
    )
    server.add_request_handler("subscriptions/listen", ListenParams, listen)
    tasks.register(server)
    components.append(tasks)

    plain = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
    streaming = StreamableHTTPSessionManager(app=server, json_response=False, stateless=True)
    admission: Admission = auth.admission
    if not settings.auth.audit_fail_open:
        # A decision that cannot be recorded is not made: 503 and not ready until the trail writes again.
        admission = RefuseWhileUnavailable(admission, audit.log.unavailable_reason)
        probes.append(("audit_unavailable", audit.log.ready))
    endpoint = McpEndpoint(
        plain=plain,
        streaming=streaming,
        admission=admission,
        max_body_bytes=settings.max_body_bytes,
        max_json_depth=settings.http.max_json_depth,
        audit=audit.log.record,
    )
    components.append(Parts(lifetime=lambda: _both(plain.run(), streaming.run())))
    if settings.lab_served:
        components.append(
            build_lab(
                settings.lab,
                admission=admission,
                audit=audit_reader,
                resource_url=settings.resource_url,
                tenant_claim=settings.auth.tenant_claim,
                simulation=Simulation(
                    send=InProcessMcp(endpoint, url=settings.resource_url),
                    trail=audit_reader,
                    flush_audit=lambda: anyio.to_thread.run_sync(audit.log.flush),
                    # Without the development issuer only the request with no token is shown.
                    mint=_simulation_minter(dev) if dev is not None and settings.simulation_served else None,
                )
                if settings.lab.simulation
                else None,
            )
        )

    # For the commands that act for this server (`aml-mcp token`, `aml-mcp revoke`): see server_record.
    record = ServerRecord(settings.resource_url, tuple(auth.trusted_issuers))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        database.open()
        try:
            for component in components:
                for migration in component.migrations:
                    await database.apply(migration)
            record.write(data_dir)
            async with contextlib.AsyncExitStack() as stack:
                for component in components:
                    await stack.enter_async_context(component.running())
                yield
                runtime.begin_shutdown()
        finally:
            database.close()

    # Outermost: the header count is checked before anything builds a header mapping.
    middleware = [
        Middleware(
            HeaderLimits, max_count=settings.http.max_header_count, max_bytes=settings.http.max_header_bytes
        ),
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
    metrics.watch_readiness(readiness)
    # No /metrics here: it has a listener of its own (`app.state.metrics_app`, see cli/metrics_listener).
    routes: list[BaseRoute] = [
        Route("/mcp", endpoint),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readiness.endpoint, methods=["GET"]),
    ]
    routes += [route for component in components for route in component.routes]
    app = Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.listen = listen
    app.state.mcp_server = server  # what the isolation tests enumerate: every method it serves
    app.state.audit = audit.log
    app.state.metrics = metrics
    app.state.metrics_app = metrics_app(
        metrics,
        host=settings.metrics_host,
        allowed_hosts=settings.allowed_hosts if settings.dns_rebinding_protection else None,
        max_header_count=settings.http.max_header_count,
        max_header_bytes=settings.http.max_header_bytes,
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


def _waking(*wakes: Callable[[], None]) -> Callable[[], Awaitable[None]]:
    async def hook() -> None:
        for wake in wakes:
            wake()

    return hook


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
