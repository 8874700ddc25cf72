"""From verified claims to a `Principal`: the checks shared by JWTs and introspection answers.

Whatever proved the token authentic (a signature, an introspection endpoint), the same rules
decide whether it is a token *for this server* and who it speaks for: the audience must name this
server's canonical resource URI (RFC 8707 — the load-bearing wall), the time window must hold, and
subject, client, tenant and scope must all be present.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aml_mcp.auth.errors import TokenRejected
from aml_mcp.principal import Principal

_MAX_CLAIM = 256


def canonical_resource(uri: str) -> str:
    """Lower-case scheme and host (the spec asks servers to accept either case); nothing else changes."""
    try:
        parts = urlsplit(uri)
        return urlunsplit(parts._replace(scheme=parts.scheme.lower(), netloc=parts.netloc.lower()))
    except ValueError:
        return uri


@dataclass(frozen=True, slots=True)
class ClaimRules:
    """What every accepted token must say, whoever issued it."""

    resource: str
    """This server's canonical resource URI: the audience every token must carry."""
    tenant_claim: str
    leeway_seconds: int

    def audience_ok(self, aud: Any) -> bool:
        wanted = canonical_resource(self.resource)
        values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        return any(isinstance(value, str) and canonical_resource(value) == wanted for value in values)


def _string_claim(claims: Mapping[str, Any], name: str, reason: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value or len(value) > _MAX_CLAIM:
        raise TokenRejected(reason, f"token has no usable '{name}' claim")
    if any(ord(ch) < 0x20 for ch in value):
        raise TokenRejected(reason, f"token '{name}' claim contains control characters")
    return value


def _scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    value = claims.get("scope")
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return frozenset(value)
    raise TokenRejected("missing_scope_claim", "token has no 'scope' claim")


def _time(claims: Mapping[str, Any], name: str, *, required: bool) -> float | None:
    value = claims.get(name)
    if value is None:
        if required:
            raise TokenRejected("missing_claim", f"token has no '{name}' claim")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenRejected("malformed_token", f"token '{name}' claim is not a number")
    return float(value)


def principal_from_claims(
    claims: Mapping[str, Any], rules: ClaimRules, *, issuer: str, now: float, require_jti: bool
) -> Principal:
    """Check everything but authenticity and the issuer (the caller did those) and build the principal.

    Order matters only for which reason is reported first; the audience comes first because a
    token for another server must be named as such, whatever else is wrong with it.
    """
    if "aud" not in claims:
        raise TokenRejected("wrong_audience", "token has no audience")
    if not rules.audience_ok(claims["aud"]):
        raise TokenRejected("wrong_audience", "token audience does not name this server")
    exp = _time(claims, "exp", required=True)
    assert exp is not None
    if exp + rules.leeway_seconds <= now:
        raise TokenRejected("expired", "token has expired")
    nbf = _time(claims, "nbf", required=False)
    if nbf is not None and nbf - rules.leeway_seconds > now:
        raise TokenRejected("not_yet_valid", "token is not valid yet (nbf)")
    iat = _time(claims, "iat", required=True)
    assert iat is not None
    if iat - rules.leeway_seconds > now:
        raise TokenRejected("not_yet_valid", "token was issued in the future (iat)")
    subject = _string_claim(claims, "sub", "missing_subject")
    client_claim = "client_id" if "client_id" in claims else "azp"
    client_id = _string_claim(claims, client_claim, "missing_client")
    tenant = _string_claim(claims, rules.tenant_claim, "missing_tenant")
    scopes = _scopes(claims)
    token_id: str | None = None
    if "jti" in claims or require_jti:
        token_id = _string_claim(claims, "jti", "missing_jti")
    return Principal(
        issuer=issuer,
        subject=subject,
        tenant=tenant,
        client_id=client_id,
        scopes=scopes,
        expires_at=exp,
        token_id=token_id,
    )
