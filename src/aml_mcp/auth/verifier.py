"""The token verifier the gate uses: JWTs by signature, opaque tokens by introspection, repeats from memory.

A verified JWT is remembered by the SHA-256 of the token (never the token) until it expires, so a
client sending the same token on every request pays for one signature check, not one per request.
The cache only shortens *positive* verification; expiry is re-checked on every hit, revocation and
scope are decided by the gate on every request, and the cache is emptied whenever an issuer drops
a key, so a withdrawn key stops working at the next refresh of that issuer's keys.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from aml_mcp.auth.errors import TokenRejected
from aml_mcp.auth.jwt_verifier import looks_like_jwt
from aml_mcp.principal import Principal


class Verifier(Protocol):
    async def verify(self, token: str) -> Principal: ...


class TokenVerifier:
    def __init__(
        self,
        jwt: Verifier,
        introspection: Verifier | None = None,
        *,
        cache_size: int = 10_000,
        leeway_seconds: float = 0,
        reverify_after_seconds: float = float("inf"),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.jwt = jwt
        self.introspection = introspection
        self.cache_size = cache_size
        self.leeway_seconds = leeway_seconds
        self.reverify_after_seconds = reverify_after_seconds
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()

    def forget_all(self) -> None:
        """Drop every remembered verification (called when an issuer withdraws a key)."""
        self._cache.clear()

    async def verify(self, token: str) -> Principal:
        if not looks_like_jwt(token):
            if self.introspection is None:
                raise TokenRejected("malformed_token", "token is not a well-formed JWT")
            return await self.introspection.verify(token)
        if self.cache_size <= 0:
            return await self.jwt.verify(token)
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None:
            principal, verified_at = cached
            expires_at = principal.expires_at
            fresh = now - verified_at < self.reverify_after_seconds
            if fresh and expires_at is not None and expires_at + self.leeway_seconds > now:
                self._cache.move_to_end(digest)
                return principal
            del self._cache[digest]
        principal = await self.jwt.verify(token)
        self._cache[digest] = (principal, now)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return principal
