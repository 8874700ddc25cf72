"""Assembles the resource server for the composition root: `build_auth(settings, ...)`.

`app.py` calls this once and uses what it returns: the `Admission` for /mcp, the extra routes
(RFC 9728 metadata and, in development, the authorization server), the store migrations, the
`AuditLog` (also handed to the Tasks service), the revocation list (for listen streams to re-check)
and a lifespan that owns the HTTP client, key prefetch and the revocation refresher.

What `tools/list` shows a caller who lacks a tool's scope: every tool. Hiding tools would stop a
client from ever learning that a step-up (asking the user for one more scope) would let it call
them; listing is not calling, and every `tools/call` is still checked. The required scope is in
each tool's `_meta` (`aml-mcp/requiredScope`), and list results are marked `cacheScope: private`
while authentication is on, so no shared cache serves them across callers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.routing import Route

from aml_mcp.audit import (
    AUDIT_COMPONENT,
    AUDIT_FILE_NAME,
    AUDIT_MIGRATIONS,
    AuditLog,
    AuditSink,
    JsonLinesSink,
    LoggerSink,
    StoreSink,
)
from aml_mcp.auth.challenge import Challenges
from aml_mcp.auth.claims import ClaimRules
from aml_mcp.auth.gate import BearerAdmission
from aml_mcp.auth.introspection import IntrospectionVerifier
from aml_mcp.auth.jwks import IssuerKeys, JwksFetcher, RemoteJwks
from aml_mcp.auth.jwt_verifier import JwtVerifier, TrustedIssuer
from aml_mcp.auth.metadata import ProtectedResourceMetadata
from aml_mcp.auth.revocation import REVOCATION_COMPONENT, REVOCATION_MIGRATIONS, RevocationList
from aml_mcp.auth.scopes import ScopeHierarchy
from aml_mcp.auth.verifier import TokenVerifier
from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.config import Settings
from aml_mcp.devauth.wiring import DevAuth, build_dev_auth
from aml_mcp.http.endpoint import Admission, OpenAdmission
from aml_mcp.principal import Principal
from aml_mcp.scope_rules import ScopeRules, tool_scope
from aml_mcp.store.sqlite import SqliteDatabase

logger = logging.getLogger(__name__)


class _HttpClient:
    """The one outbound HTTP client (keys, metadata, introspection), open for the app's lifetime."""

    def __init__(self) -> None:
        self.client: httpx.AsyncClient | None = None

    def __call__(self) -> httpx.AsyncClient:
        if self.client is None:
            raise RuntimeError("the auth HTTP client is used outside the app's lifespan")
        return self.client


@dataclass
class AuthComponents:
    admission: Admission
    audit: AuditLog
    revocations: RevocationList
    hierarchy: ScopeHierarchy
    routes: list[Route] = field(default_factory=list)
    migrations: list[tuple[str, list[str]]] = field(default_factory=list)
    cache_scope: str = "public"
    dev: DevAuth | None = None
    issuer_keys: list[IssuerKeys] = field(default_factory=list)
    enabled: bool = False
    _http: _HttpClient = field(default_factory=_HttpClient)

    @property
    def revoked(self) -> Callable[[Principal], str | None] | None:
        """For listen streams' re-checks: why a credential is revoked, or None (absent when auth is off)."""
        return self.revocations.check if self.enabled else None

    @property
    def missing_scopes(self) -> Callable[[Principal, frozenset[str]], frozenset[str]] | None:
        """For listen streams' re-checks: needed scopes a credential lacks, hierarchy applied."""
        if not self.enabled:
            return None
        hierarchy = self.hierarchy
        return lambda principal, needed: hierarchy.missing(principal.scopes, needed)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Open the HTTP client, warm the key caches, watch the revocation list; undo on exit."""
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(self.audit.close)
            if self.dev is not None:
                stack.callback(self.dev.close)
            self._http.client = await stack.enter_async_context(
                httpx.AsyncClient(timeout=httpx.Timeout(5.0), follow_redirects=False)
            )
            for keys in self.issuer_keys:
                await keys.prefetch()
            await stack.enter_async_context(self.revocations.watching())
            yield


def _audit_log(settings: Settings, database: SqliteDatabase) -> AuditLog:
    sinks: list[AuditSink] = [StoreSink(database)]
    if settings.auth.audit_file:
        sinks.append(JsonLinesSink(settings.data_dir / AUDIT_FILE_NAME))
    if settings.auth.audit_to_log:
        sinks.append(LoggerSink())
    return AuditLog(sinks)


def _tool_scope_hint(tools: ToolRegistry) -> Callable[[str, Mapping[str, Any]], frozenset[str]]:
    def hint(method: str, params: Mapping[str, Any]) -> frozenset[str]:
        return tool_scope(tools, params) if method == "tools/call" else frozenset()

    return hint


def _scopes_supported(configured: list[str] | None, tools: ToolRegistry) -> Callable[[], list[str]]:
    """PRM `scopes_supported`: as configured, else every scope a tool declares (read when served)."""
    if configured is not None:
        fixed = list(configured)
        return lambda: fixed
    return lambda: sorted(tools.scopes)


def build_auth(
    settings: Settings, *, database: SqliteDatabase, scope_rules: ScopeRules, tools: ToolRegistry
) -> AuthComponents:
    """The resource server described by `settings.auth` (or the open admission when it is off)."""
    auth = settings.auth
    resource = settings.resource_url
    hierarchy = ScopeHierarchy(auth.scope_hierarchy)
    audit = _audit_log(settings, database)
    revocations = RevocationList(database, refresh_seconds=auth.revocation_refresh_seconds)
    migrations = [(AUDIT_COMPONENT, AUDIT_MIGRATIONS), (REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)]
    if not auth.enabled:
        return AuthComponents(
            admission=OpenAdmission(),
            audit=audit,
            revocations=revocations,
            hierarchy=hierarchy,
            migrations=migrations,
        )

    http = _HttpClient()
    rules = ClaimRules(resource=resource, tenant_claim=auth.tenant_claim, leeway_seconds=auth.leeway_seconds)
    verifier_ref: list[TokenVerifier] = []

    def forget_verified() -> None:
        for verifier in verifier_ref:
            verifier.forget_all()

    def issuer_keys(issuer: str, fetch: JwksFetcher) -> IssuerKeys:
        return IssuerKeys(
            issuer,
            fetch,
            cache_seconds=auth.jwks_cache_seconds,
            refetch_interval=auth.jwks_refetch_interval_seconds,
            on_keys_removed=forget_verified,
        )

    trusted: dict[str, TrustedIssuer] = {}
    routes: list[Route] = []
    dev: DevAuth | None = None
    if auth.dev.enabled:
        dev = build_dev_auth(
            auth, data_dir=settings.ensure_data_dir(), resource_url=resource, hierarchy=hierarchy
        )
        trusted[dev.issuer] = TrustedIssuer(
            issuer=dev.issuer,
            keys=issuer_keys(dev.issuer, dev.fetch_jwks),
            algorithms=frozenset({"RS256"}),
            token_types=frozenset({"at+jwt", "application/at+jwt"}),
        )
        routes.extend(dev.routes)
    for configured in auth.issuers:
        if configured.issuer in trusted:
            raise ValueError(f"issuer configured twice: {configured.issuer}")
        trusted[configured.issuer] = TrustedIssuer(
            issuer=configured.issuer,
            keys=issuer_keys(configured.issuer, RemoteJwks(configured.issuer, http, configured.jwks_uri)),
            algorithms=frozenset(configured.algorithms),
            token_types=frozenset(typ.lower() for typ in configured.token_types),
            require_jti=configured.require_jti,
        )
    introspection = (
        IntrospectionVerifier(auth.introspection, rules, http) if auth.introspection is not None else None
    )
    authorization_servers = list(trusted)
    if auth.introspection is not None and auth.introspection.issuer not in authorization_servers:
        authorization_servers.append(auth.introspection.issuer)
    verifier = TokenVerifier(
        JwtVerifier(trusted, rules),
        introspection,
        cache_size=auth.verified_token_cache_size,
        leeway_seconds=auth.leeway_seconds,
    )
    verifier_ref.append(verifier)
    metadata = ProtectedResourceMetadata(
        resource=resource,
        authorization_servers=authorization_servers,
        scopes_supported=_scopes_supported(auth.scopes_supported, tools),
        resource_name=auth.resource_name,
    )
    routes.extend(metadata.routes())
    admission = BearerAdmission(
        verifier=verifier,
        revocations=revocations,
        scope_rules=scope_rules,
        hierarchy=hierarchy,
        challenges=Challenges(resource),
        audit=audit,
        scope_hint=_tool_scope_hint(tools),
    )
    components = AuthComponents(
        admission=admission,
        audit=audit,
        revocations=revocations,
        hierarchy=hierarchy,
        routes=routes,
        migrations=migrations,
        cache_scope="private",
        dev=dev,
        enabled=True,
        issuer_keys=[issuer.keys for issuer in trusted.values()],
    )
    components._http = http
    return components
