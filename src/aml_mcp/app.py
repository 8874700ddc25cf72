"""The composition root: `build_app(settings)` wires every part of the server together.

Nothing else in the package constructs long-lived collaborators; each module receives what it
needs from here, so the wiring of the whole server can be read in one place.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route

from aml_mcp.aml.wiring import build_aml
from aml_mcp.auth.wiring import build_auth
from aml_mcp.catalog import Catalog
from aml_mcp.config import Settings
from aml_mcp.http.endpoint import Admission, McpEndpoint
from aml_mcp.http.guard import HostOriginGuard, default_hosts, default_origins
from aml_mcp.http.health import ReadinessProbe, healthz, readyz
from aml_mcp.protocol.server import build_server
from aml_mcp.scope_rules import ScopeRules, tool_scope_rule
from aml_mcp.secrets_store import load_or_create_secret
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.subscriptions.bus import LocalEventBus
from aml_mcp.subscriptions.events import AccessChanged, ListChanged
from aml_mcp.subscriptions.listen import ListenHandler, ListenParams
from aml_mcp.subscriptions.policy import CredentialPolicy
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


def build_app(settings: Settings, *, catalog: Catalog | None = None) -> Starlette:
    """Build the ASGI application described by `settings`, serving `catalog` (default: the AML tools)."""
    data_dir = settings.ensure_data_dir()
    runtime = Runtime()
    database = SqliteDatabase(data_dir / "aml-mcp.db")
    # (component, steps): each durable component's schema, brought up to date before the first request.
    migrations: list[tuple[str, list[str]]] = []
    aml = None
    if catalog is None:
        aml = build_aml(settings.aml, data_dir=data_dir, database=database)
        catalog = aml.catalog
        migrations.append(aml.migration)
    scope_rules = ScopeRules()
    scope_rules.add("tools/call", tool_scope_rule(catalog.tools))
    auth = build_auth(settings, database=database, scope_rules=scope_rules, tools=catalog.tools)
    migrations.extend(auth.migrations)
    bus = LocalEventBus()
    tasks = build_tasks(
        settings.tasks, database=database, tools=catalog.tools, audit=auth.audit.record_task, bus=bus
    )
    migrations.append(tasks.migration)

    catalog.tools.changes.add(lambda: bus.publish(ListChanged("tools")))
    served = {"tools"}
    if catalog.prompts is not None:
        catalog.prompts.changes.add(lambda: bus.publish(ListChanged("prompts")))
        served.add("prompts")
    if catalog.resources is not None:
        catalog.resources.changes.add(lambda: bus.publish(ListChanged("resources")))
        served.add("resources")
    listen = ListenHandler(
        bus,
        served=frozenset(served),
        policy=CredentialPolicy(revoked=auth.revoked, missing_scopes=auth.missing_scopes),
        resource_exists=catalog.resources.knows if catalog.resources is not None else None,
        tasks=tasks.following,
    )
    runtime.shutdown_hooks.append(listen.close_all)
    auth.revocations.changes.add(lambda: bus.publish(AccessChanged()))

    admission: Admission = auth.admission
    server = build_server(
        catalog=catalog,
        list_ttl_ms=settings.list_ttl_ms,
        cache_scope=auth.cache_scope,
        request_state_keys=[load_or_create_secret(data_dir / "keys" / "request-state.key")],
        tasks=tasks.handlers,
        extensions=tasks.extensions,
    )
    server.add_request_handler("subscriptions/listen", ListenParams, listen)
    tasks.register(server, scope_rules)

    plain = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)
    streaming = StreamableHTTPSessionManager(app=server, json_response=False, stateless=True)
    endpoint = McpEndpoint(
        plain=plain, streaming=streaming, admission=admission, max_body_bytes=settings.max_body_bytes
    )

    probes: list[tuple[str, ReadinessProbe]] = [("store", database.ping)]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        database.open()
        try:
            for component, steps in migrations:
                await database.migrate(component, steps)
            async with (
                aml.running() if aml is not None else contextlib.nullcontext(),
                plain.run(),
                streaming.run(),
                tasks.running(),
                auth.running(),
            ):
                yield
                runtime.begin_shutdown()
        finally:
            database.close()

    middleware = []
    if settings.dns_rebinding_protection:
        middleware.append(
            Middleware(
                HostOriginGuard,
                hosts=default_hosts(settings.resource_url) + settings.allowed_hosts,
                origins=default_origins(settings.resource_url) + settings.allowed_origins,
            )
        )
    app = Starlette(
        routes=[
            Route("/mcp", endpoint),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/readyz", readyz(probes), methods=["GET"]),
            *auth.routes,
        ],
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.runtime = runtime
    app.state.settings = settings
    app.state.listen = listen
    return app
