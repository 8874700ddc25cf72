"""The refusals of the resource server: RFC 6750 / RFC 9728 challenges with JSON-RPC error bodies.

Every refusal carries `WWW-Authenticate: Bearer` with `resource_metadata` (so a client can always
find the authorization server), plus `error`/`scope` where RFC 6750 §3.1 defines them:

- no credential → 401, no `error` (RFC 6750 §3.1: a request without authentication gets none);
- a credential that is not acceptable → 401 `error="invalid_token"`;
- a valid credential without the needed scope → 403 `error="insufficient_scope"`, `scope="..."`;
- a malformed authorization request (token in the query string, two Authorization headers) →
  400 `error="invalid_request"`.

The body is a JSON-RPC error echoing the request id, with the OAuth error in `error.data`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from mcp_types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.responses import Response

from aml_mcp.http.responses import jsonrpc_error

WELL_KNOWN = "/.well-known/oauth-protected-resource"


def resource_metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known segment goes between the host and the resource's path."""
    parts = urlsplit(resource)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme, parts.netloc, f"{WELL_KNOWN}{path}", "", ""))


def _quoted(value: str) -> str:
    """An auth-param value; our values never need escaping, but nothing may break out of the quotes."""
    cleaned = "".join(ch for ch in value if ch not in '"\\' and 0x20 <= ord(ch) < 0x7F)
    return f'"{cleaned}"'


def bearer_challenge(
    metadata_url: str,
    *,
    error: str | None = None,
    description: str | None = None,
    scopes: Iterable[str] = (),
) -> str:
    params: list[tuple[str, str]] = []
    if error is not None:
        params.append(("error", error))
    if description is not None:
        params.append(("error_description", description))
    scope = " ".join(sorted(scopes))
    if scope:
        params.append(("scope", scope))
    params.append(("resource_metadata", metadata_url))
    return "Bearer " + ", ".join(f"{name}={_quoted(value)}" for name, value in params)


class Challenges:
    """Builds the refusals for one resource (its metadata URL is in every challenge)."""

    def __init__(self, resource: str) -> None:
        self.metadata_url = resource_metadata_url(resource)

    def _refusal(
        self,
        status: int,
        request_id: Any,
        message: str,
        *,
        error: str | None,
        description: str,
        scopes: Iterable[str] = (),
    ) -> Response:
        scopes = sorted(scopes)
        data: dict[str, Any] = {"error": error or "unauthorized", "error_description": description}
        if scopes:
            data["scope"] = " ".join(scopes)
        header = bearer_challenge(
            self.metadata_url, error=error, description=description if error else None, scopes=scopes
        )
        return jsonrpc_error(
            status,
            INVALID_REQUEST,
            message,
            request_id=request_id,
            data=data,
            headers={"WWW-Authenticate": header, "Cache-Control": "no-store"},
        )

    def missing_token(self, request_id: Any, scopes: Iterable[str] = ()) -> Response:
        """RFC 6750 §3.1: no `error` (nor description) in the challenge when no credential was sent."""
        return self._refusal(
            401,
            request_id,
            "Unauthorized: a bearer token is required",
            error=None,
            description="a bearer token is required",
            scopes=scopes,
        )

    def invalid_token(self, request_id: Any, description: str) -> Response:
        return self._refusal(
            401, request_id, f"Unauthorized: {description}", error="invalid_token", description=description
        )

    def insufficient_scope(self, request_id: Any, needed: Iterable[str]) -> Response:
        needed = sorted(needed)
        description = f"this request needs scope {' '.join(needed)}"
        return self._refusal(
            403,
            request_id,
            f"Forbidden: {description}",
            error="insufficient_scope",
            description=description,
            scopes=needed,
        )

    def invalid_request(self, request_id: Any, description: str) -> Response:
        return self._refusal(
            400, request_id, f"Bad request: {description}", error="invalid_request", description=description
        )

    def unavailable(self, request_id: Any) -> Response:
        """The issuer's keys or introspection endpoint are unreachable: refused, not the token's fault."""
        return jsonrpc_error(
            503,
            INTERNAL_ERROR,
            "Token verification is temporarily unavailable",
            request_id=request_id,
            headers={"Retry-After": "5", "Cache-Control": "no-store"},
        )
