"""RFC 9068 JWT access tokens: algorithm allow-list, trusted issuer, signature, then the shared claim rules.

PyJWT checks the signature; everything else is decided here so each refusal has its own reason.
The header and payload are read unverified only to choose the issuer and key — nothing from them
is believed until the signature over them has been checked with a key of that very issuer.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from aml_mcp.auth.claims import ClaimRules, principal_from_claims
from aml_mcp.auth.errors import TokenRejected
from aml_mcp.auth.jwks import IssuerKeys
from aml_mcp.auth.settings import ALLOWED_ALGORITHMS
from aml_mcp.principal import Principal

MAX_TOKEN_BYTES = 16 * 1024

_jws = jwt.PyJWS(options={"verify_signature": True})


@dataclass(frozen=True, slots=True)
class TrustedIssuer:
    """An issuer this server accepts tokens from, with its keys and its own strictness settings."""

    issuer: str
    keys: IssuerKeys
    algorithms: frozenset[str]
    token_types: frozenset[str]
    require_jti: bool = True


def _peek(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Header and claims, *unverified*, only to route the token to its issuer's keys.

    A plain base64url + JSON read: PyJWT's own parser (which validates every character) runs once,
    in the signature check that decides; parsing twice with it doubled the cost of a new token.
    """
    try:
        header_b64, payload_b64, _ = token.split(".")
        header = json.loads(base64.urlsafe_b64decode(header_b64 + "=" * (-len(header_b64) % 4)))
        payload = json.loads(base64.urlsafe_b64decode(payload_b64 + "=" * (-len(payload_b64) % 4)))
    except (ValueError, TypeError, RecursionError):
        raise TokenRejected("malformed_token", "token is not a well-formed JWT") from None
    if not isinstance(header, dict) or not isinstance(payload, dict):
        raise TokenRejected("malformed_token", "token is not a well-formed JWT")
    return header, payload


def _check_header(header: dict[str, Any], trusted: TrustedIssuer) -> None:
    typ = header.get("typ")
    if not isinstance(typ, str) or typ.lower() not in trusted.token_types:
        raise TokenRejected("wrong_token_type", "token is not a JWT access token (typ at+jwt)")
    if "crit" in header or "b64" in header:
        # RFC 7515 §4.1.11: critical extensions a recipient does not understand must be refused.
        raise TokenRejected("malformed_token", "token uses JOSE extensions this server does not accept")


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


class JwtVerifier:
    def __init__(
        self,
        issuers: Mapping[str, TrustedIssuer],
        rules: ClaimRules,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.issuers = dict(issuers)
        self.rules = rules
        self._clock = clock

    async def verify(self, token: str) -> Principal:
        if len(token) > MAX_TOKEN_BYTES:
            raise TokenRejected("malformed_token", "token is too large")
        header, unverified = _peek(token)
        alg = header.get("alg")
        if alg not in ALLOWED_ALGORITHMS:
            # Refuses "none" and every HMAC algorithm (a public key used as an HMAC secret).
            raise TokenRejected("disallowed_algorithm", "token signature algorithm is not accepted")
        issuer_id = unverified.get("iss")
        trusted = self.issuers.get(issuer_id) if isinstance(issuer_id, str) else None
        if trusted is None:
            raise TokenRejected("wrong_issuer", "token issuer is not trusted by this server")
        if alg not in trusted.algorithms:
            raise TokenRejected("disallowed_algorithm", "token signature algorithm is not accepted")
        _check_header(header, trusted)
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRejected("malformed_token", "token 'kid' header is not a string")
        keys = await trusted.keys.candidates(kid, alg)
        if not keys:
            raise TokenRejected("unknown_key", "token was signed with a key this server does not know")
        verified_header, claims = self._verified(token, keys, alg)
        # The routing above read the same bytes; decide again on what the signature covers.
        _check_header(verified_header, trusted)
        if claims.get("iss") != trusted.issuer:
            raise TokenRejected("wrong_issuer", "token issuer is not trusted by this server")
        return principal_from_claims(
            claims, self.rules, issuer=trusted.issuer, now=self._clock(), require_jti=trusted.require_jti
        )

    @staticmethod
    def _verified(token: str, keys: list[Any], alg: str) -> tuple[dict[str, Any], dict[str, Any]]:
        for candidate in keys:
            try:
                # The one authoritative (strict) parse, and the signature check.
                verified = _jws.decode_complete(token, candidate.key, algorithms=[alg])
            except jwt.InvalidSignatureError:
                continue
            except (jwt.InvalidKeyError, jwt.InvalidAlgorithmError, jwt.DecodeError, ValueError, TypeError):
                continue
            try:
                claims = json.loads(verified["payload"])
            except ValueError:
                raise TokenRejected("malformed_token", "token payload is not JSON") from None
            if not isinstance(claims, dict):
                raise TokenRejected("malformed_token", "token payload is not a JSON object")
            return dict(verified["header"]), claims
        raise TokenRejected("bad_signature", "token signature is invalid")
