"""Assembles the development authorization server for the composition root and the command line.

The issuer is a `Component` (its routes; its own SQLite file, closed when the app stops) that the
composition root builds first and then hands to the resource server as a trusted local issuer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from starlette.routing import BaseRoute

from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.devauth.authorization_server import CimdFetcher, DevAuthorizationServer, RegistrationLimits
from aml_mcp.devauth.client_metadata import ClientMetadataDocuments, DocumentFetcher
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.minting import TokenMinter
from aml_mcp.devauth.routes import DevAuthRoutes
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.sqlite_store import DevClient, DevStore, digest
from aml_mcp.devauth.users import UserDirectory
from aml_mcp.scope_rules import ScopeRule
from aml_mcp.secrets_store import load_or_create_secret
from aml_mcp.store.sqlite import Migration

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


def service_client_secret(data_dir: Path) -> str:
    return load_or_create_secret(data_dir / "keys" / "devauth-service-client.secret").hex()


@dataclass
class DevAuth:
    """The development authorization server as a `Component`, and what the rest of the app needs."""

    issuer: str
    keys: DevSigningKeys
    minter: TokenMinter
    server: DevAuthorizationServer
    store: DevStore
    routes: Sequence[BaseRoute]
    service_secret: str
    migrations: Sequence[Migration] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)

    async def fetch_jwks(self) -> Mapping[str, Any]:
        """The key source the resource server verifies dev tokens with (no HTTP round trip to itself)."""
        return self.keys.jwks()

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The issuer's own database stays open for the app's lifetime."""
        try:
            yield
        finally:
            self.store.close()


def token_minter(data_dir: Path, *, resource_url: str, path: str, tenant_claim: str) -> TokenMinter:
    """Just the minter (for `aml-mcp token` and tests): signs with the data directory's dev keys."""
    return TokenMinter(
        DevSigningKeys(data_dir),
        issuer=dev_issuer(resource_url, path),
        default_audience=resource_url,
        tenant_claim=tenant_claim,
    )


NETWORK: Literal["network"] = "network"
"""Fetch Client ID Metadata Documents from the network (the default), within the settings' limits."""


def client_metadata_documents(
    settings: DevAuthSettings, fetch: CimdFetcher | Literal["network"] = NETWORK
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
    data_dir: Path,
    resource_url: str,
    tenant_claim: str,
    hierarchy: ScopeHierarchy,
    users: UserDirectory | None = None,
    fetch_client_metadata: CimdFetcher | Literal["network"] | None = NETWORK,
    preregistered: Sequence[DevClient] = (),
) -> DevAuth:
    """The issuer, its store and routes. `fetch_client_metadata` is where Client ID Metadata
    Documents come from: the network (default), another source (tests), or None to refuse them."""
    users = users or UserDirectory()
    minter = token_minter(data_dir, resource_url=resource_url, path=settings.path, tenant_claim=tenant_claim)
    store = DevStore(data_dir / "devauth.db", replay_memory_seconds=settings.refresh_token_ttl_seconds)
    secret = service_client_secret(data_dir)
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
    )
    routes = DevAuthRoutes(
        server=server,
        users=users,
        keys=minter.keys,
        form_secret=load_or_create_secret(data_dir / "keys" / "devauth-form.key"),
        mount_path=settings.path,
        max_body_bytes=settings.max_body_bytes,
    )
    return DevAuth(
        issuer=minter.issuer,
        keys=minter.keys,
        minter=minter,
        server=server,
        store=store,
        routes=routes.routes(),
        service_secret=secret,
    )
