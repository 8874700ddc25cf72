"""Assembles the development authorization server for the composition root and the command line.

The issuer is a `Component` (its routes; its state, closed when the app stops) that the
composition root builds first and then hands to the resource server as a trusted local issuer.

Its state — clients, codes, refresh tokens, signing keys, the service client's secret and the
consent form's key — comes from the persistence object: the data directory on one host, or the
PostgreSQL database replicas share, where every replica redeems what any other issued, signs with
the same key and publishes the same JWKS.

The resource server is built after the issuer (it trusts the issuer's keys), and the issuer then
hands the access tokens of grant families a replay revoked to the resource server's revocation
list: the composition root connects them with `DevAuth.revoke_into(...)`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import anyio.to_thread
from starlette.routing import BaseRoute

from aml_mcp.auth.revocation import RevocationList
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.devauth.authorization_server import DevAuthorizationServer, RegistrationLimits
from aml_mcp.devauth.client_metadata import ClientMetadataDocuments, DocumentFetcher, DocumentSource
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.login_limits import LoginLimits
from aml_mcp.devauth.minting import TokenMinter
from aml_mcp.devauth.revocations import CLOCK_SLACK_SECONDS, FamilyRevocations
from aml_mcp.devauth.routes import DevAuthRoutes
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.storage import DevAuthStore, DevClient, digest
from aml_mcp.devauth.users import UserDirectory
from aml_mcp.scope_rules import ScopeRule
from aml_mcp.shared_secrets.storage import SecretSource

CLI_CLIENT_ID = "aml-mcp-cli"
"""Pre-registered public client (authorization code + PKCE) for command-line tools on the user's
machine: any `http` loopback redirect URI (127.0.0.1, localhost, [::1]; any port and path)."""
SERVICE_CLIENT_ID = "aml-mcp-service"
"""Pre-registered confidential client for the client credentials grant."""


def dev_issuer(resource_url: str, path: str) -> str:
    """The dev issuer: the server's base URL (the resource URL without its final `/mcp`) plus `path`."""
    parts = urlsplit(resource_url)
    base = parts.path[: -len("/mcp")] if parts.path.endswith("/mcp") else ""
    return urlunsplit((parts.scheme, parts.netloc, f"{base}{path}", "", ""))


SERVICE_SECRET_NAME = "devauth-service-client"  # noqa: S105 (a name, not a secret)
FORM_SECRET_NAME = "devauth-form"  # noqa: S105


def service_client_secret(secrets: SecretSource) -> str:
    """The pre-registered service client's secret: every replica stores its digest, so they must all
    read the same one (the persistence object's secrets are the data directory's, or shared)."""
    return secrets.secret(SERVICE_SECRET_NAME).hex()


@dataclass
class DevAuth:
    """The development authorization server as a `Component`, and what the rest of the app needs."""

    issuer: str
    keys: DevSigningKeys
    minter: TokenMinter
    server: DevAuthorizationServer
    store: DevAuthStore
    routes: Sequence[BaseRoute]
    service_secret: str
    family_revocations: FamilyRevocations
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)

    def revoke_into(self, revocations: RevocationList) -> None:
        """Access tokens minted from a grant family that a replay revoked go to `revocations` (the
        resource server's list, shared by every replica), so they are refused at once."""
        self.family_revocations.into(revocations)

    async def fetch_jwks(self) -> Mapping[str, Any]:
        """The key source the resource server verifies dev tokens with (no HTTP round trip to itself).

        On a worker thread: with a shared database, reading the keys is a query."""
        keys: Mapping[str, Any] = await anyio.to_thread.run_sync(self.keys.jwks)
        return keys

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The issuer's state (its file or its connections) stays open for the app's lifetime, and
        revoked families' access tokens are published in the background meanwhile."""
        try:
            async with self.family_revocations.running():
                yield
        finally:
            self.store.close()


def token_minter(
    keys: DevSigningKeys,
    *,
    resource_url: str,
    path: str,
    tenant_claim: str,
) -> TokenMinter:
    """Just the minter (for `aml-mcp token` and tests): signs with `keys`."""
    return TokenMinter(
        keys,
        issuer=dev_issuer(resource_url, path),
        default_audience=resource_url,
        tenant_claim=tenant_claim,
    )


NETWORK: Literal["network"] = "network"
"""Fetch Client ID Metadata Documents from the network (the default), within the settings' limits."""


def client_metadata_documents(
    settings: DevAuthSettings, fetch: DocumentSource | Literal["network"] = NETWORK
) -> ClientMetadataDocuments:
    """The documents' cache and limiter, over the network fetcher or another source (tests)."""
    if fetch == NETWORK:
        fetch = DocumentFetcher(
            max_bytes=settings.client_metadata_max_bytes,
            timeout_seconds=settings.client_metadata_timeout_seconds,
            threads=settings.client_metadata_concurrency,
        ).fetch
    return ClientMetadataDocuments(
        fetch,
        timeout_seconds=settings.client_metadata_timeout_seconds,
        concurrency=settings.client_metadata_concurrency,
        cache_seconds=settings.client_metadata_cache_seconds,
        failure_cache_seconds=settings.client_metadata_failure_cache_seconds,
        cache_entries=settings.client_metadata_cache_entries,
        max_redirect_uris=settings.max_redirect_uris,
        max_redirect_uri_chars=settings.max_redirect_uri_chars,
    )


def build_dev_auth(
    settings: DevAuthSettings,
    *,
    store: DevAuthStore,
    keys: DevSigningKeys,
    secrets: SecretSource,
    resource_url: str,
    tenant_claim: str,
    hierarchy: ScopeHierarchy,
    users: UserDirectory | None = None,
    fetch_client_metadata: DocumentSource | Literal["network"] | None = NETWORK,
    preregistered: Sequence[DevClient] = (),
    token_leeway_seconds: int = 30,
) -> DevAuth:
    """The issuer on `store` and `keys` (from the persistence object: the data directory's, or the
    database every replica shares, so any replica redeems what another issued and all sign alike),
    its routes. `fetch_client_metadata` is where Client ID Metadata Documents come from: the network
    (default), another source (tests), or None to refuse them. `token_leeway_seconds` is how long
    past its expiry the resource server still accepts a token: a revocation of one must outlast it.
    The store is closed with the component (or here, if assembling fails)."""
    try:
        return _assemble(
            settings,
            store,
            keys,
            secrets,
            resource_url=resource_url,
            tenant_claim=tenant_claim,
            hierarchy=hierarchy,
            users=users or UserDirectory(),
            fetch_client_metadata=fetch_client_metadata,
            preregistered=preregistered,
            token_leeway_seconds=token_leeway_seconds,
        )
    except BaseException:
        store.close()
        raise


def _assemble(
    settings: DevAuthSettings,
    store: DevAuthStore,
    keys: DevSigningKeys,
    secrets: SecretSource,
    *,
    resource_url: str,
    tenant_claim: str,
    hierarchy: ScopeHierarchy,
    users: UserDirectory,
    fetch_client_metadata: DocumentSource | Literal["network"] | None,
    preregistered: Sequence[DevClient],
    token_leeway_seconds: int,
) -> DevAuth:
    minter = token_minter(keys, resource_url=resource_url, path=settings.path, tenant_claim=tenant_claim)
    secret = service_client_secret(secrets)
    store.put_client(
        DevClient(
            client_id=CLI_CLIENT_ID,
            redirect_uris=("http://127.0.0.1/callback", "http://localhost/callback"),
            client_name="aml-mcp command line",
            any_loopback_redirect=True,
        )
    )
    store.put_client(
        DevClient(
            client_id=SERVICE_CLIENT_ID,
            grant_types=("client_credentials",),
            response_types=(),
            token_endpoint_auth_method="client_secret_basic",  # noqa: S106
            client_name="aml-mcp service account",
            tenant=settings.client_credentials_tenant,
            secret_sha256=digest(secret),
        )
    )
    for client in preregistered:  # other components' clients (the lab's page)
        store.put_client(client)
    scopes: set[str] = set(hierarchy.scopes)
    for user in users:
        scopes |= user.scopes
    server = DevAuthorizationServer(
        issuer=minter.issuer,
        default_resource=resource_url,
        store=store,
        minter=minter,
        hierarchy=hierarchy,
        scopes_supported=sorted(scopes),
        access_token_ttl=settings.access_token_ttl_seconds,
        refresh_token_ttl=settings.refresh_token_ttl_seconds,
        documents=(
            client_metadata_documents(settings, fetch_client_metadata)
            if fetch_client_metadata is not None
            else None
        ),
        registration_limits=RegistrationLimits(
            max_client_name_chars=settings.max_client_name_chars,
            max_redirect_uris=settings.max_redirect_uris,
            max_redirect_uri_chars=settings.max_redirect_uri_chars,
            max_registered_clients=settings.max_registered_clients,
            max_registrations_per_minute=settings.max_registrations_per_minute,
        ),
        revocation_margin_seconds=token_leeway_seconds + CLOCK_SLACK_SECONDS,
    )
    family_revocations = FamilyRevocations(store, issuer=minter.issuer)
    routes = DevAuthRoutes(
        server=server,
        users=users,
        keys=minter.keys,
        # The consent form's MAC key: a login page served by one replica may be posted to another.
        form_secret=secrets.secret(FORM_SECRET_NAME),
        mount_path=settings.path,
        max_body_bytes=settings.max_body_bytes,
        login_limits=LoginLimits(
            max_failures_per_user=settings.login_max_failures_per_user,
            max_failures_per_address=settings.login_max_failures_per_address,
            backoff_base_seconds=settings.login_backoff_base_seconds,
            backoff_max_seconds=settings.login_backoff_max_seconds,
            memory_seconds=settings.login_failure_memory_seconds,
            max_entries=settings.login_limiter_max_entries,
        ),
        revocations=family_revocations,
    )
    return DevAuth(
        issuer=minter.issuer,
        keys=minter.keys,
        minter=minter,
        server=server,
        store=store,
        routes=routes.routes(),
        service_secret=secret,
        family_revocations=family_revocations,
    )
