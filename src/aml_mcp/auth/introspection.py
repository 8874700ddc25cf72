"""RFC 7662 introspection for opaque access tokens, with answers cached no longer than the token lives.

The raw token is sent only to the configured introspection endpoint and is never kept: the cache is
keyed by its SHA-256 digest. An active answer is held until the earlier of the token's `exp` and
`cache_seconds`; an inactive one for a few seconds, so a burst of bad tokens cannot flood the issuer.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import httpx

from aml_mcp.auth.claims import ClaimRules, principal_from_claims
from aml_mcp.auth.errors import TokenRejected, VerifierUnavailable
from aml_mcp.auth.settings import IntrospectionSettings
from aml_mcp.principal import Principal

logger = logging.getLogger(__name__)

NEGATIVE_CACHE_SECONDS = 5.0
MAX_CACHED = 10_000


class IntrospectionVerifier:
    def __init__(
        self,
        settings: IntrospectionSettings,
        rules: ClaimRules,
        http: Callable[[], httpx.AsyncClient],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.rules = rules
        self._http = http
        self._clock = clock
        self._cache: OrderedDict[bytes, tuple[float, Principal | TokenRejected]] = OrderedDict()
        self.calls = 0

    async def verify(self, token: str) -> Principal:
        digest = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            outcome = cached[1]
            if isinstance(outcome, TokenRejected):
                raise outcome
            return outcome
        try:
            principal = await self._introspect(token, now)
        except TokenRejected as rejected:
            if not isinstance(rejected, VerifierUnavailable):
                self._remember(digest, now + NEGATIVE_CACHE_SECONDS, rejected)
            raise
        expires_at = principal.expires_at if principal.expires_at is not None else now
        self._remember(digest, min(expires_at, now + self.settings.cache_seconds), principal)
        return principal

    def _remember(self, digest: bytes, until: float, outcome: Principal | TokenRejected) -> None:
        self._cache[digest] = (until, outcome)
        self._cache.move_to_end(digest)
        while len(self._cache) > MAX_CACHED:
            self._cache.popitem(last=False)

    async def _introspect(self, token: str, now: float) -> Principal:
        self.calls += 1
        try:
            response = await self._http().post(
                self.settings.endpoint,
                data={"token": token, "token_type_hint": "access_token"},
                auth=(self.settings.client_id, self.settings.client_secret.get_secret_value()),
                headers={"accept": "application/json"},
                timeout=self.settings.timeout_seconds,
            )
        except httpx.HTTPError as exc:
            logger.warning("introspection request failed: %s", type(exc).__name__)
            raise VerifierUnavailable("the token introspection endpoint is unavailable") from None
        if response.status_code != 200:
            logger.warning("introspection endpoint answered HTTP %s", response.status_code)
            raise VerifierUnavailable("the token introspection endpoint is unavailable")
        try:
            answer: Any = response.json()
        except ValueError:
            raise VerifierUnavailable("the token introspection endpoint answered badly") from None
        if not isinstance(answer, dict) or answer.get("active") is not True:
            raise TokenRejected("inactive_token", "token is not active")
        issuer = answer.get("iss", self.settings.issuer)
        if issuer != self.settings.issuer:
            raise TokenRejected("wrong_issuer", "token issuer is not trusted by this server")
        if "iat" not in answer:
            answer = {**answer, "iat": now}  # RFC 7662 makes iat optional; the window still needs exp
        return principal_from_claims(answer, self.rules, issuer=issuer, now=now, require_jti=False)
