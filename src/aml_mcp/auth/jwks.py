"""Signing keys of a trusted issuer: fetched once, cached, refetched on rotation — never per request.

`IssuerKeys` answers "which key has this `kid`" from memory. Keys are fetched when first needed,
again when older than the cache lifetime, and once more when a token names a `kid` the cache does
not know (the issuer may have rotated) — at most once per `refetch_interval`, so a flood of tokens
with made-up key ids cannot turn into a flood of requests to the issuer.

Where the keys come from is a `JwksFetcher`: `RemoteJwks` fetches them over HTTP (from a configured
`jwks_uri`, or the one named in the issuer's RFC 8414 / OpenID metadata); the embedded development
authorization server passes a fetcher that reads its key file instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from aml_mcp.auth.errors import VerifierUnavailable

logger = logging.getLogger(__name__)

JwksFetcher = Callable[[], Awaitable[Mapping[str, Any]]]
"""Returns a JWK Set document (`{"keys": [...]}`); raises on failure."""

_MAX_DOCUMENT_BYTES = 512 * 1024


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str | None
    key: Any
    """A `cryptography` public key object."""
    alg: str | None
    """The JWK's own `alg`, when it pins one."""

    def fits(self, alg: str) -> bool:
        """Whether this key may check a signature made with `alg` (key type and pinned alg agree)."""
        if self.alg is not None and self.alg != alg:
            return False
        if alg in {"RS256", "PS256"}:
            return isinstance(self.key, rsa.RSAPublicKey) and self.key.key_size >= 2048
        if alg == "ES256":
            return isinstance(self.key, ec.EllipticCurvePublicKey) and isinstance(
                self.key.curve, ec.SECP256R1
            )
        if alg == "EdDSA":
            return isinstance(self.key, ed25519.Ed25519PublicKey)
        return False


def parse_jwks(document: Mapping[str, Any]) -> list[VerificationKey]:
    """The usable signature keys of a JWK Set; malformed, private or non-signing keys are skipped."""
    keys = document.get("keys")
    if not isinstance(keys, list):
        raise ValueError("JWK Set has no 'keys' list")
    parsed: list[VerificationKey] = []
    for entry in keys:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        if "d" in entry:  # a private key published by mistake is not trusted for anything
            continue
        try:
            jwk = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        kid = entry.get("kid")
        alg = entry.get("alg")
        parsed.append(
            VerificationKey(
                kid=kid if isinstance(kid, str) else None,
                key=jwk.key,
                alg=alg if isinstance(alg, str) else None,
            )
        )
    return parsed


def metadata_urls(issuer: str) -> list[str]:
    """Where an issuer's metadata may live: RFC 8414 path insertion first, then OpenID Connect forms."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")

    def at(new_path: str) -> str:
        return urlunsplit((parts.scheme, parts.netloc, new_path, "", ""))

    if path:
        return [
            at(f"/.well-known/oauth-authorization-server{path}"),
            at(f"/.well-known/openid-configuration{path}"),
            at(f"{path}/.well-known/openid-configuration"),
        ]
    return [at("/.well-known/oauth-authorization-server"), at("/.well-known/openid-configuration")]


async def _get_json(http: httpx.AsyncClient, url: str) -> Any:
    response = await http.get(url, headers={"accept": "application/json"})
    if response.status_code != 200:
        raise LookupError(f"{url} answered HTTP {response.status_code}")
    if len(response.content) > _MAX_DOCUMENT_BYTES:
        raise ValueError(f"{url} answered with an oversized document")
    return response.json()


class RemoteJwks:
    """Fetches an issuer's JWK Set over HTTP, discovering `jwks_uri` from its metadata if not configured."""

    def __init__(
        self, issuer: str, http: Callable[[], httpx.AsyncClient], jwks_uri: str | None = None
    ) -> None:
        self.issuer = issuer
        self._http = http
        self._jwks_uri = jwks_uri

    async def _discover(self) -> str:
        http = self._http()
        failures: list[str] = []
        for url in metadata_urls(self.issuer):
            try:
                metadata = await _get_json(http, url)
            except (httpx.HTTPError, LookupError, ValueError) as exc:
                failures.append(str(exc))
                continue
            if not isinstance(metadata, dict):
                failures.append(f"{url}: not a JSON object")
                continue
            if metadata.get("issuer") != self.issuer:
                # RFC 8414 §3.3: metadata for another issuer must not be used.
                failures.append(f"{url}: names issuer {metadata.get('issuer')!r}")
                continue
            jwks_uri = metadata.get("jwks_uri")
            if isinstance(jwks_uri, str) and jwks_uri:
                return jwks_uri
            failures.append(f"{url}: no jwks_uri")
        raise LookupError("; ".join(failures) or "no metadata")

    async def __call__(self) -> Mapping[str, Any]:
        if self._jwks_uri is None:
            self._jwks_uri = await self._discover()
        document = await _get_json(self._http(), self._jwks_uri)
        if not isinstance(document, dict):
            raise ValueError("JWK Set is not a JSON object")
        return document


class IssuerKeys:
    """The cached keys of one issuer."""

    def __init__(
        self,
        issuer: str,
        fetch: JwksFetcher,
        *,
        cache_seconds: float,
        refetch_interval: float,
        on_keys_removed: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.issuer = issuer
        self._fetch = fetch
        self._cache_seconds = cache_seconds
        self._refetch_interval = refetch_interval
        self._on_keys_removed = on_keys_removed
        self._clock = clock
        self._keys: list[VerificationKey] | None = None
        self._fetched_at = float("-inf")
        self._lock = anyio.Lock()
        self.fetch_count = 0

    async def _refresh(self) -> None:
        try:
            document = await self._fetch()
            keys = parse_jwks(document)
        except Exception as exc:
            self._fetched_at = self._clock()  # a failure also spends the refetch budget
            if self._keys is None:
                logger.warning("keys of issuer %s unavailable: %s", self.issuer, exc)
                raise VerifierUnavailable("the token issuer's keys are unavailable") from None
            logger.warning("refreshing keys of issuer %s failed, keeping the old ones: %s", self.issuer, exc)
            return
        self.fetch_count += 1
        previous = {key.kid for key in self._keys or []}
        self._keys = keys
        self._fetched_at = self._clock()
        if previous - {key.kid for key in keys} and self._on_keys_removed is not None:
            self._on_keys_removed()

    async def candidates(self, kid: str | None, alg: str) -> list[VerificationKey]:
        """Keys that may have signed a token with this `kid` and `alg` (empty: none, even after a refetch)."""
        if self._keys is None or self._clock() - self._fetched_at >= self._cache_seconds:
            async with self._lock:
                if self._keys is None and self._clock() - self._fetched_at < self._refetch_interval:
                    # The last attempt failed moments ago: do not hammer an issuer that is down.
                    raise VerifierUnavailable("the token issuer's keys are unavailable")
                if self._keys is None or self._clock() - self._fetched_at >= self._cache_seconds:
                    await self._refresh()
        found = self._match(kid, alg)
        if found or self._clock() - self._fetched_at < self._refetch_interval:
            return found
        async with self._lock:
            if self._clock() - self._fetched_at >= self._refetch_interval:
                await self._refresh()
        return self._match(kid, alg)

    def _match(self, kid: str | None, alg: str) -> list[VerificationKey]:
        keys = self._keys or []
        if kid is not None:
            return [key for key in keys if key.kid == kid and key.fits(alg)]
        usable = [key for key in keys if key.fits(alg)]
        return usable if len(usable) == 1 else []  # no kid: only an unambiguous single key will do

    async def prefetch(self) -> None:
        """Warm the cache at start-up so the first request does not wait; failures are only logged."""
        async with self._lock:
            if self._keys is None:
                with contextlib.suppress(VerifierUnavailable):
                    await self._refresh()
