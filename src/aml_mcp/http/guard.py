"""DNS-rebinding protection: refuse requests whose Host or Origin this server does not answer to.

A page on an attacker's domain that resolves to 127.0.0.1 still sends its own Host and Origin;
checking both keeps a local server from being driven by a browser tab. Applies to every route.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from mcp_types import INVALID_REQUEST
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from aml_mcp.http.responses import jsonrpc_error
from aml_mcp.loopback import LOOPBACK_HOSTS


class _Patterns:
    """Exact values plus `name:*` patterns that accept any port."""

    def __init__(self, values: Iterable[str]) -> None:
        self.exact: set[str] = set()
        self.any_port: set[str] = set()
        for value in values:
            value = value.strip().lower()
            if value.endswith(":*"):
                self.any_port.add(value[:-2])
            elif value:
                self.exact.add(value)

    def accepts(self, value: str) -> bool:
        value = value.lower()
        if value in self.exact:
            return True
        base, sep, port = value.rpartition(":")
        return bool(sep) and port.isdigit() and base in self.any_port


def default_hosts(public_url: str) -> list[str]:
    hosts = [f"{host}:*" for host in LOOPBACK_HOSTS] + list(LOOPBACK_HOSTS)
    netloc = urlsplit(public_url).netloc
    if netloc:
        hosts.append(netloc)
    return hosts


def default_origins(public_url: str) -> list[str]:
    origins = [f"{scheme}://{host}:*" for scheme in ("http", "https") for host in LOOPBACK_HOSTS]
    origins += [f"{scheme}://{host}" for scheme in ("http", "https") for host in LOOPBACK_HOSTS]
    parts = urlsplit(public_url)
    if parts.scheme and parts.netloc:
        origins.append(f"{parts.scheme}://{parts.netloc}")
    return origins


class HostOriginGuard:
    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], origins: Iterable[str]) -> None:
        self.app = app
        self.hosts = _Patterns(hosts)
        self.origins = _Patterns(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host")
        if host is None or not self.hosts.accepts(host):
            response = jsonrpc_error(421, INVALID_REQUEST, "Host not allowed")
            await response(scope, receive, send)
            return
        origin = headers.get("origin")
        if origin is not None and not self.origins.accepts(origin):
            response = jsonrpc_error(403, INVALID_REQUEST, "Origin not allowed")
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
