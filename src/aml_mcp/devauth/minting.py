"""Minting RFC 9068 access tokens with the development issuer's key.

One place builds the claims, so tokens from the authorization flows, from `aml-mcp token` and from
test helpers are shaped identically: `iss`, `sub`, `aud` (the RFC 8707 resource), `client_id`,
the tenant claim, `scope`, `iat`/`nbf`/`exp`, and a random `jti`.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aml_mcp.devauth.keys import DevSigningKeys


@dataclass(frozen=True, slots=True)
class MintedToken:
    token: str
    claims: Mapping[str, Any]

    @property
    def jti(self) -> str:
        return str(self.claims["jti"])


class TokenMinter:
    def __init__(
        self,
        keys: DevSigningKeys,
        *,
        issuer: str,
        default_audience: str,
        tenant_claim: str = "tenant",
    ) -> None:
        self.keys = keys
        self.issuer = issuer
        self.default_audience = default_audience
        self.tenant_claim = tenant_claim

    def mint(
        self,
        *,
        subject: str,
        tenant: str,
        client_id: str,
        scopes: Iterable[str],
        audience: str | None = None,
        ttl_seconds: int = 900,
        extra: Mapping[str, Any] | None = None,
    ) -> MintedToken:
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "sub": subject,
            "aud": audience or self.default_audience,
            "client_id": client_id,
            self.tenant_claim: tenant,
            "scope": " ".join(sorted(set(scopes))),
            "iat": now,
            "nbf": now,
            "exp": now + ttl_seconds,
            "jti": secrets.token_urlsafe(16),
        }
        if extra:
            claims.update(extra)
        return MintedToken(self.keys.sign(claims), claims)
