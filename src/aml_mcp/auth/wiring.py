"""Assembles the resource server for the composition root: `build_auth(settings, ...) -> Auth`.

`app.py` hands in what it constructs itself — the audit log, the complete scope rules, the scope
hierarchy and any issuer whose keys live in this process (the development issuer) — and uses
what comes back: the `Admission` for /mcp, the RFC 9728 metadata routes, the revocation list's
schema, and a lifetime that owns the outbound HTTP client, key prefetch and the revocation
refresher. This package imports neither the settings composition nor the development issuer.

What `tools/list` shows a caller who lacks a tool's scope: every tool. Hiding tools would stop a
client from ever learning that a step-up (asking the user for one more scope) would let it call
them; listing is not calling, and every `tools/call` is still checked. The required scope is in
each tool's `_meta` (`aml-mcp/requiredScope`), and list results are marked `cacheScope: private`
while authentication is on, so no shared cache serves them across callers.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import httpx
from starlette.routing import BaseRoute

from aml_mcp.audit import AuditRecorder
from aml_mcp.auth.challenge import Challenges
from aml_mcp.auth.claims import ClaimRules
from aml_mcp.auth.gate import BearerAdmission
from aml_mcp.auth.introspection import IntrospectionVerifier
from aml_mcp.auth.jwks import IssuerKeys, JwksFetcher, RemoteJwks
from aml_mcp.auth.jwt_verifier import JwtVerifier, TrustedIssuer
from aml_mcp.auth.metadata import ProtectedResourceMetadata
from aml_mcp.auth.revocation import RevocationList
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.settings import ResourceServerSettings
from aml_mcp.auth.storage import RevocationStore
from aml_mcp.auth.verifier import TokenVerifier
from aml_mcp.http.endpoint import Admission, OpenAdmission
from aml_mcp.principal import Principal
from aml_mcp.scope_rules import ScopeRule, ScopeRules

logger = logging.getLogger(__name__)

RFC9068_TOKEN_TYPES = frozenset({"at+jwt", "application/at+jwt"})


@dataclass(frozen=True, slots=True)
class LocalIssuer:
    """An issuer whose signing keys this process holds (the development issuer): its tokens are
    verified with keys read in-process, never fetched over HTTP from ourselves."""

    issuer: str
    fetch_jwks: JwksFetcher


class _HttpClient:
    """The one outbound HTTP client (keys, metadata, introspection), open for the app's lifetime."""

    def __init__(self) -> None:
        self.client: httpx.AsyncClient | None = None

    def __call__(self) -> httpx.AsyncClient:
        if self.client is None:
            raise RuntimeError("the auth HTTP client is used outside the app's lifespan")
        return self.client


@dataclass
class Auth:
    """The resource server as a `Component`, and what the rest of the app needs from it."""

    admission: Admission
    revocations: RevocationList
    hierarchy: ScopeHierarchy
    routes: Sequence[BaseRoute] = ()
    cache_scope: str = "public"
    enabled: bool = False
    trusted_issuers: Sequence[str] = ()
    """Every `iss` a token may carry here (JWT issuers, then the introspection issuer)."""
    issuer_keys: list[IssuerKeys] = field(default_factory=list)
    http: _HttpClient = field(default_factory=_HttpClient)
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)

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
            self.http.client = await stack.enter_async_context(
                httpx.AsyncClient(timeout=httpx.Timeout(5.0), follow_redirects=False)
            )
            for keys in self.issuer_keys:
                await keys.prefetch()
            await stack.enter_async_context(self.revocations.watching())
            yield


def build_auth(
    settings: ResourceServerSettings,
    *,
    resource_url: str,
    revocation_store: RevocationStore,
    audit: AuditRecorder,
    scope_rules: ScopeRules,
    hierarchy: ScopeHierarchy,
    default_scopes: Callable[[], Iterable[str]],
    local_issuers: Sequence[LocalIssuer] = (),
) -> Auth:
    """The resource server described by `settings` (or the open admission when it is off).

    `default_scopes` is read whenever the metadata document is served, unless `scopes_supported`
    is configured: the served catalog's tool scopes. `revocation_store` is the persistence object's.
    """
    revocations = RevocationList(
        revocation_store,
        refresh_seconds=settings.revocation_refresh_seconds,
    )
    if not settings.enabled:
        return Auth(admission=OpenAdmission(), revocations=revocations, hierarchy=hierarchy)

    http = _HttpClient()
    rules = ClaimRules(
        resource=resource_url,
        tenant_claim=settings.tenant_claim,
        leeway_seconds=settings.leeway_seconds,
        subject_claim=settings.subject_claim,
        scope_claims=tuple(settings.scope_claims),
        client_claims=tuple(settings.client_claims),
    )
    verifier_ref: list[TokenVerifier] = []

    def forget_verified() -> None:
        for verifier in verifier_ref:
            verifier.forget_all()

    def issuer_keys(issuer: str, fetch: JwksFetcher) -> IssuerKeys:
        return IssuerKeys(
            issuer,
            fetch,
            cache_seconds=settings.jwks_cache_seconds,
            refetch_interval=settings.jwks_refetch_interval_seconds,
            on_keys_removed=forget_verified,
        )

    trusted: dict[str, TrustedIssuer] = {}
    for local in local_issuers:
        trusted[local.issuer] = TrustedIssuer(
            issuer=local.issuer,
            keys=issuer_keys(local.issuer, local.fetch_jwks),
            algorithms=frozenset({"RS256"}),
            token_types=RFC9068_TOKEN_TYPES,
        )
    for configured in settings.issuers:
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
        IntrospectionVerifier(settings.introspection, rules, http)
        if settings.introspection is not None
        else None
    )
    authorization_servers = list(trusted)
    if settings.introspection is not None and settings.introspection.issuer not in authorization_servers:
        authorization_servers.append(settings.introspection.issuer)
    verifier = TokenVerifier(
        JwtVerifier(trusted, rules),
        introspection,
        cache_size=settings.verified_token_cache_size,
        leeway_seconds=settings.leeway_seconds,
        reverify_after_seconds=settings.jwks_cache_seconds,
    )
    verifier_ref.append(verifier)
    configured_scopes = settings.scopes_supported
    metadata = ProtectedResourceMetadata(
        resource=resource_url,
        authorization_servers=authorization_servers,
        scopes_supported=(
            (lambda: list(configured_scopes))
            if configured_scopes is not None
            else (lambda: sorted(default_scopes()))
        ),
        resource_name=settings.resource_name,
    )
    admission = BearerAdmission(
        verifier=verifier,
        revocations=revocations,
        scope_rules=scope_rules,
        hierarchy=hierarchy,
        challenges=Challenges(resource_url),
        audit=audit,
    )
    return Auth(
        admission=admission,
        revocations=revocations,
        hierarchy=hierarchy,
        trusted_issuers=tuple(authorization_servers),
        routes=metadata.routes(),
        cache_scope="private",
        enabled=True,
        issuer_keys=[issuer.keys for issuer in trusted.values()],
        http=http,
    )
