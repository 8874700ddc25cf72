"""RFC 9728 protected resource metadata: where a client learns which authorization server to ask.

Served at the root well-known URI and at the path-inserted one for the MCP endpoint
(`/.well-known/oauth-protected-resource/mcp`), which is the one the 401 challenge names.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from aml_mcp.auth.challenge import WELL_KNOWN


class ProtectedResourceMetadata:
    def __init__(
        self,
        *,
        resource: str,
        authorization_servers: Sequence[str],
        scopes_supported: Callable[[], Sequence[str]],
        resource_name: str,
    ) -> None:
        if not authorization_servers:
            raise ValueError("authentication is on but no authorization server is trusted")
        self.resource = resource
        self.authorization_servers = list(authorization_servers)
        self.scopes_supported = scopes_supported
        self.resource_name = resource_name

    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": self.resource_name,
        }
        scopes = sorted(self.scopes_supported())
        if scopes:  # optional in RFC 9728; an empty list would make clients ask for no scope at all
            document["scopes_supported"] = scopes
        return document

    async def endpoint(self, request: Request) -> Response:
        return JSONResponse(self.document(), headers={"Cache-Control": "max-age=300"})

    def routes(self) -> list[Route]:
        paths = {WELL_KNOWN, f"{WELL_KNOWN}/mcp"}
        path = urlsplit(self.resource).path.rstrip("/")
        if path:
            paths.add(f"{WELL_KNOWN}{path}")
        return [Route(p, self.endpoint, methods=["GET"]) for p in sorted(paths)]
