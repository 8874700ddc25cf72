"""From verified claims to a `Principal`: the checks shared by JWTs and introspection answers.

Whatever proved the token authentic (a signature, an introspection endpoint), the same rules
decide whether it is a token *for this server* and who it speaks for: the audience must name this
server's canonical resource URI (RFC 8707 — the load-bearing wall), the time window must hold, and
subject, client, tenant and scope must all be present, as plain visible text (`unsafe_character`).

Where each of those four comes from is the issuer's choice, so it is a setting (`ClaimRules`): the
subject may be `oid` or `preferred_username` rather than `sub`, scopes may come as `scope` (a
space-separated string) or `scp` (a list), the client as `client_id`, `azp` or `cid`, and the tenant
from a nested claim (`org.bank`) or a list of one. A claim of the right name but the wrong shape — a
number, an object, a tenant list naming two banks — is refused as `malformed_claim`, never guessed at.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from aml_mcp.auth.errors import TokenRejected
from aml_mcp.principal import SIMULATED_CLAIM, Principal

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
    """What every accepted token must say, whoever issued it, and which claims say it."""

    resource: str
    """This server's canonical resource URI: the audience every token must carry."""
    tenant_claim: str
    """A claim name or a dotted path (`claim_at`); its value a string or a list of one string."""
    leeway_seconds: int
    subject_claim: str = "sub"
    """A claim name or a dotted path (`claim_at`); its value a string."""
    scope_claims: tuple[str, ...] = ("scope", "scp")
    """The first of these present carries the scopes: a space-separated string or a list of strings."""
    client_claims: tuple[str, ...] = ("client_id", "azp")
    """The first of these present names the client."""

    def audience_ok(self, aud: Any) -> bool:
        wanted = canonical_resource(self.resource)
        values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
        return any(isinstance(value, str) and canonical_resource(value) == wanted for value in values)


UNSAFE_IDENTITY = "unsafe_identity"
"""The audit reason of a token whose identity holds a character that makes text lie about itself."""

_UNSAFE_CATEGORIES = {
    "Cc": "a control character",
    "Cf": "an invisible formatting character",
    "Zl": "a line separator",
    "Zp": "a paragraph separator",
}
_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_ASCII_UNSAFE = re.compile("[\x00-\x1f\x7f]")


def unsafe_character(text: str) -> str | None:
    """What is wrong with `text` as an identity shown to people, or `None` when nothing is.

    Refused: control characters (C0, DEL, C1), bidi controls (which reorder what follows, so
    `car\\u202eol` reads as another name), zero-width and other invisible formatting characters
    (Unicode category Cf: two names that look the same are different principals), and line and
    paragraph separators. Such a name would reach the audit trail, the lab's tables and an
    operator's terminal looking like someone else. Lone surrogates are the gate's own check.
    """
    if text.isascii():
        found = _ASCII_UNSAFE.search(text)
        return None if found is None else f"a control character (U+{ord(found.group()):04X})"
    for ch in text:
        kind = _UNSAFE_CATEGORIES.get(unicodedata.category(ch))
        if kind is not None:
            what = "a bidi control" if ch in _BIDI_CONTROLS else kind
            return f"{what} (U+{ord(ch):04X})"
    return None


class UnsafeIdentity(TokenRejected):
    """A verified token whose identity claim `claim` holds a character `unsafe_character` refuses.

    It carries the value so the refusal's audit record can show it (escaped): the token is
    authentic, and whoever investigates needs to see what the issuer put in it.
    """

    def __init__(self, claim: str, value: str, what: str) -> None:
        super().__init__(
            UNSAFE_IDENTITY,
            f"token '{claim}' claim contains {what}; identities must be plain, visible text",
        )
        self.claim = claim
        self.value = value


def check_identity(claim: str, value: str) -> None:
    """Raise `UnsafeIdentity` when `value` (of the claim so named) is not plain, visible text."""
    what = unsafe_character(value)
    if what is not None:
        raise UnsafeIdentity(claim, value, what)


MALFORMED_CLAIM = "malformed_claim"
"""The audit reason of a verified token whose identity claim has a shape no rule reads as one value."""


def claim_at(claims: Mapping[str, Any], name: str) -> Any:
    """The value `name` picks out of `claims`, or `None` when there is none.

    A claim of exactly that name comes first (so URL-named claims such as
    `https://aml.bank.example/tenant` are read as they are, dots and all); otherwise a dotted name
    is a path into nested objects: `org.bank` reads `{"org": {"bank": ...}}`. A path through
    anything but an object finds nothing. JSON `null` counts as absent.
    """
    if name in claims:
        return claims[name]
    if "." not in name:
        return None
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _shape(value: Any) -> str:
    """What a claim value is, for a refusal's description (never the value itself)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)} values"
    return "not a string"


def _malformed(name: str, value: Any, wanted: str) -> TokenRejected:
    return TokenRejected(MALFORMED_CLAIM, f"token '{name}' claim is {_shape(value)}; {wanted}")


def _string_claim(claims: Mapping[str, Any], name: str, reason: str) -> str:
    """The string at `name`: absent, empty or over-long is `reason`; another shape is malformed."""
    value = claim_at(claims, name)
    if value is not None and not isinstance(value, str):
        raise _malformed(name, value, "a string is needed")
    if not value or len(value) > _MAX_CLAIM:
        raise TokenRejected(reason, f"token has no usable '{name}' claim")
    check_identity(name, value)
    return value


def _tenant(claims: Mapping[str, Any], name: str) -> str:
    """The tenant: a string, or a list holding exactly one (some providers only emit lists, e.g.
    group or attribute mappers). A list naming several banks is refused, never one picked."""
    value = claim_at(claims, name)
    if isinstance(value, list):
        if len(value) > 1:
            raise _malformed(name, value, "exactly one tenant is needed")
        if value and not isinstance(value[0], str):
            raise TokenRejected(MALFORMED_CLAIM, f"token '{name}' claim holds {_shape(value[0])}")
        return _string_claim({name: value[0] if value else None}, name, "missing_tenant")
    return _string_claim({name: value}, name, "missing_tenant")


def _first_present(claims: Mapping[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        value = claim_at(claims, name)
        if value is not None:
            return name, value
    return names[0], None


def _scopes(claims: Mapping[str, Any], names: tuple[str, ...]) -> frozenset[str]:
    name, value = _first_present(claims, names)
    if value is None:
        raise TokenRejected("missing_scope_claim", f"token has no '{name}' claim")
    if isinstance(value, str):
        scopes = frozenset(value.split())
    elif isinstance(value, list) and all(isinstance(item, str) for item in value):
        scopes = frozenset(value)
    else:
        raise _malformed(name, value, "scopes are a space-separated string or a list of strings")
    for scope in scopes:  # shown in the audit trail and the lab beside the identity
        check_identity("scope", scope)
    return scopes


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
    subject = _string_claim(claims, rules.subject_claim, "missing_subject")
    client_claim, _ = _first_present(claims, rules.client_claims)
    client_id = _string_claim(claims, client_claim, "missing_client")
    tenant = _tenant(claims, rules.tenant_claim)
    scopes = _scopes(claims, rules.scope_claims)
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
        simulated=SIMULATED_CLAIM in claims,
    )
