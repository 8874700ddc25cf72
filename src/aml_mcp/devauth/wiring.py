"""Assembles the development authorization server for the composition root and the command line.

The issuer is a `Component` (its routes; its own SQLite file, closed when the app stops) that the
composition root builds first and then hands to the resource server as a trusted local issuer.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from starlette.routing import BaseRoute

from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.devauth.authorization_server import CimdFetcher, DevAuthorizationServer
from aml_mcp.devauth.client_metadata import fetch_client_metadata_document
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
"""Pre-registered public client (authorization code + PKCE) with loopback redirects on any port."""
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


def build_dev_auth(
    settings: DevAuthSettings,
    *,
    data_dir: Path,
    resource_url: str,
    tenant_claim: str,
    hierarchy: ScopeHierarchy,
    users: UserDirectory | None = None,
    fetch_client_metadata: CimdFetcher | None = fetch_client_metadata_document,
) -> DevAuth:
    users = users or UserDirectory()
    minter = token_minter(data_dir, resource_url=resource_url, path=settings.path, tenant_claim=tenant_claim)
    store = DevStore(data_dir / "devauth.db")
    secret = service_client_secret(data_dir)
    store.put_client(
        DevClient(
            client_id=CLI_CLIENT_ID,
            redirect_uris=("http://127.0.0.1/callback", "http://localhost/callback"),
            client_name="aml-mcp command line",
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
        fetch_client_metadata=fetch_client_metadata,
    )
    routes = DevAuthRoutes(
        server=server,
        users=users,
        keys=minter.keys,
        form_secret=load_or_create_secret(data_dir / "keys" / "devauth-form.key"),
        mount_path=settings.path,
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
