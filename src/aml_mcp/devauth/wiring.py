"""Assembles the development authorization server for the composition root and the command line."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from starlette.routing import Route

from aml_mcp.auth.scopes import ScopeHierarchy
from aml_mcp.auth.settings import AuthSettings
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.minting import TokenMinter
from aml_mcp.devauth.routes import DevAuthRoutes
from aml_mcp.devauth.server import CimdFetcher, DevAuthorizationServer
from aml_mcp.devauth.sqlite_store import DevClient, DevStore, digest
from aml_mcp.devauth.users import UserDirectory
from aml_mcp.secrets_store import load_or_create_secret

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


def fetch_client_metadata_document(url: str) -> Mapping[str, Any]:
    """Fetches a Client ID Metadata Document: https only, no redirects, small, JSON object."""
    if urlsplit(url).scheme != "https":
        raise ValueError("client metadata documents must be served over https")
    with httpx.Client(timeout=5.0, follow_redirects=False) as http:
        response = http.get(url, headers={"accept": "application/json"})
    if response.status_code != 200 or len(response.content) > 64 * 1024:
        raise LookupError(f"client metadata document unavailable ({response.status_code})")
    document = response.json()
    if not isinstance(document, dict):
        raise ValueError("client metadata document is not a JSON object")
    return document


@dataclass
class DevAuth:
    """Everything the rest of the app needs from the development authorization server."""

    issuer: str
    keys: DevSigningKeys
    minter: TokenMinter
    server: DevAuthorizationServer
    store: DevStore
    routes: list[Route]
    service_secret: str

    async def fetch_jwks(self) -> Mapping[str, Any]:
        """The key source the resource server verifies dev tokens with (no HTTP round trip to itself)."""
        return self.keys.jwks()

    def close(self) -> None:
        self.store.close()


def token_minter(data_dir: Path, settings: AuthSettings, resource_url: str) -> TokenMinter:
    """Just the minter (for `aml-mcp token` and tests): signs with the data directory's dev keys."""
    return TokenMinter(
        DevSigningKeys(data_dir),
        issuer=dev_issuer(resource_url, settings.dev.path),
        default_audience=resource_url,
        tenant_claim=settings.tenant_claim,
    )


def build_dev_auth(
    settings: AuthSettings,
    *,
    data_dir: Path,
    resource_url: str,
    hierarchy: ScopeHierarchy,
    users: UserDirectory | None = None,
    fetch_client_metadata: CimdFetcher | None = fetch_client_metadata_document,
) -> DevAuth:
    users = users or UserDirectory()
    minter = token_minter(data_dir, settings, resource_url)
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
            tenant=settings.dev.client_credentials_tenant,
            secret_sha256=digest(secret),
        )
    )
    scopes: set[str] = set()
    for user in users:
        scopes |= user.scopes
    for parent, children in settings.scope_hierarchy.items():
        scopes |= {parent, *children}
    server = DevAuthorizationServer(
        issuer=minter.issuer,
        default_resource=resource_url,
        store=store,
        minter=minter,
        hierarchy=hierarchy,
        scopes_supported=sorted(scopes),
        access_token_ttl=settings.dev.access_token_ttl_seconds,
        refresh_token_ttl=settings.dev.refresh_token_ttl_seconds,
        fetch_client_metadata=fetch_client_metadata,
    )
    routes = DevAuthRoutes(
        server=server,
        users=users,
        keys=minter.keys,
        form_secret=load_or_create_secret(data_dir / "keys" / "devauth-form.key"),
        mount_path=settings.dev.path,
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
