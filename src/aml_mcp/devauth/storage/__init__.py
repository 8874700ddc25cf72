"""What the development authorization server keeps, and the protocols of the stores that keep it.

The issuer's state is clients, authorization codes, refresh tokens (with their grant families), the
access tokens minted for each family while they live, the sign-in limiter's counts and the
registration quota's count (`DevAuthStore`), and the document of its signing keys (`KeyStorage`).
Each has an implementation for one host and one for replicas sharing a PostgreSQL database, with
the same behaviour (`tests/contract/test_devauth_store.py` and `test_devauth_keys.py` run every test
on both):

- `sqlite.SqliteDevAuthStore`: a SQLite file in the data directory, for one host;
- `files.FilesKeyStorage`: the key document as an owner-only file in the data directory;
- `postgres.PostgresDevAuthStore` and `postgres.PostgresKeyStorage`: tables in the shared database,
  so every replica behind a load balancer redeems the codes and refresh tokens any other one
  issued, signs with the same key and publishes the same JWKS.

This module names no backend, so the issuer's flows depend on the protocols alone and the choice of
backend is made once, where the issuer is assembled.

The stores are synchronous: authlib calls them from its grant hooks, which the routes run on worker
threads (`anyio.to_thread`), never on the event loop. Codes, refresh tokens and client secrets are
kept only as SHA-256 digests, so neither store holds anything a client could present.
"""

from __future__ import annotations

import hashlib
import math
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aml_mcp.devauth.login_limits import LoginLimits
from aml_mcp.devauth.redirects import loopback_redirect, redirect_matches
from aml_mcp.store.text import storable

CODE_TTL_SECONDS = 300
REGISTRATION_WINDOW_SECONDS = 60.0


def digest(value: str) -> str:
    """SHA-256 of a code, refresh token or secret: what the stores keep instead of the value.

    `surrogatepass` so that a hostile value (a lone surrogate from a percent-encoded form) still
    digests, to something no stored credential matches, instead of raising."""
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


class UnstorableValue(ValueError):
    """A value no store keeps as written: U+0000 (PostgreSQL `TEXT` cannot hold it) or an unpaired
    surrogate (neither driver can encode one). Both stores refuse it before anything is sent, so
    the two answer alike; a lookup by such a value is no refusal, it finds nothing."""


def checked(*values: str | None) -> None:
    """Raise `UnstorableValue` unless every value (`None` aside) is one both stores keep as written."""
    for value in values:
        if value is not None and not storable(value):
            raise UnstorableValue("a value holds NUL or is not valid Unicode")


def new_family() -> str:
    """A fresh grant family id: one per user authorization, inherited by every refresh token from it."""
    return secrets.token_urlsafe(16)


class RegistrationRefused(Exception):
    """Dynamic registration is over its quota: `total` (too many clients) or `rate` (too many lately)."""

    def __init__(self, kind: str, limit: int, retry_after: int | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.limit = limit
        self.retry_after = retry_after


def check_registration_quota(
    *, total: int, recent: Sequence[float], now: float, max_total: int, max_per_minute: int
) -> None:
    """Raise `RegistrationRefused` when one more registration would break the quota.

    `total` counts the registered clients; `recent` holds the issue times (newest first, at most
    `max_per_minute`) of those registered within `REGISTRATION_WINDOW_SECONDS` of `now`. Both
    stores read these under their own lock and leave the rule here.
    """
    if total >= max_total:
        raise RegistrationRefused("total", max_total)
    if len(recent) >= max_per_minute:
        retry_after = max(1, math.ceil(recent[-1] + REGISTRATION_WINDOW_SECONDS - now))
        raise RegistrationRefused("rate", max_per_minute, retry_after)


@dataclass(frozen=True, slots=True)
class DevClient:
    """A registered client, shaped for authlib's `ClientMixin` protocol."""

    client_id: str
    redirect_uris: tuple[str, ...] = ()
    grant_types: tuple[str, ...] = ("authorization_code", "refresh_token")
    response_types: tuple[str, ...] = ("code",)
    token_endpoint_auth_method: str = "none"  # noqa: S105
    client_name: str | None = None
    tenant: str | None = None
    """For a service client (client credentials): the tenant its tokens speak for."""
    secret_sha256: str | None = field(default=None, repr=False)
    any_loopback_redirect: bool = False
    """A native application on the user's machine (RFC 8252 §7.3, §8.3): besides `redirect_uris`,
    any `http` loopback redirect URI, whatever its port and path. Never set by dynamic registration."""

    # --- authlib ClientMixin ---
    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return scope or ""

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        if self.any_loopback_redirect and loopback_redirect(redirect_uri) is not None:
            return True
        return any(redirect_matches(registered, redirect_uri) for registered in self.redirect_uris)

    def check_client_secret(self, client_secret: str) -> bool:
        if self.secret_sha256 is None:
            return False
        return hashlib.sha256(client_secret.encode()).hexdigest() == self.secret_sha256

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.token_endpoint_auth_method == "none":  # noqa: S105
            return method == "none"
        return method in {"client_secret_basic", "client_secret_post"}

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types

    def to_metadata(self) -> dict[str, Any]:
        return {
            "redirect_uris": list(self.redirect_uris),
            "grant_types": list(self.grant_types),
            "response_types": list(self.response_types),
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "client_name": self.client_name,
            "tenant": self.tenant,
            "any_loopback_redirect": self.any_loopback_redirect,
        }

    @classmethod
    def from_metadata(
        cls, client_id: str, metadata: Mapping[str, Any], secret_sha256: str | None
    ) -> DevClient:
        return cls(
            client_id=client_id,
            redirect_uris=tuple(metadata.get("redirect_uris") or ()),
            grant_types=tuple(metadata.get("grant_types") or ("authorization_code",)),
            response_types=tuple(metadata.get("response_types") or ("code",)),
            token_endpoint_auth_method=metadata.get("token_endpoint_auth_method") or "none",
            client_name=metadata.get("client_name"),
            tenant=metadata.get("tenant"),
            secret_sha256=secret_sha256,
            any_loopback_redirect=metadata.get("any_loopback_redirect") is True,
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """Who a code or refresh token speaks for, and for which resource (RFC 8707) and scopes.

    `family` ties every refresh token to the authorization it descends from, so a replay of any
    of them can revoke them all (RFC 9700 §4.14.2); empty for grants without refresh tokens.
    """

    client_id: str
    scope: str
    subject: str
    tenant: str
    resource: str
    family: str = ""

    # authlib reads these off authorization codes and refresh tokens
    def get_scope(self) -> str:
        return self.scope

    def check_client(self, client: DevClient) -> bool:
        return client.client_id == self.client_id


@dataclass(frozen=True, slots=True)
class StoredCode(Grant):
    redirect_uri: str = ""
    code_challenge: str = ""
    code_challenge_method: str = "S256"
    code_sha256: str = ""

    def get_redirect_uri(self) -> str:
        return self.redirect_uri


@dataclass(frozen=True, slots=True)
class StoredRefreshToken(Grant):
    token_sha256: str = ""


@dataclass(frozen=True, slots=True)
class RevokedAccessToken:
    """An access token of a revoked grant family that the resource server must refuse until
    `keep_until` (epoch seconds: its expiry plus the leeway a verifier grants)."""

    jti: str
    keep_until: float


class DevAuthStore(Protocol):
    """Everything the authorization server, its routes, the wiring and the CLI ask of the state.

    The decisions that must hold under concurrent requests, on one process or many, are the
    store's: a code or refresh token is redeemed by exactly one caller; a credential presented
    again after use revokes its whole grant family (RFC 6749 §4.1.2, RFC 9700 §4.14.2), and with
    it the access tokens minted from that family; a refresh or access token stored into a family
    revoked meanwhile is born revoked; registrations stay within the quota and sign-in attempts
    within their limits however many arrive at once.
    """

    replay_memory_seconds: float
    """How long used codes and revoked families are remembered, so that a replay is recognised."""

    def close(self) -> None:
        """Release the file or the connections (the store is not used afterwards)."""
        ...

    def put_client(self, client: DevClient, *, replace: bool = True) -> None:
        """Store a pre-registered client (not counted against the registration quota)."""
        ...

    def register_client(self, client: DevClient, *, max_total: int, max_per_minute: int) -> None:
        """Store a dynamically registered client within the quota, or raise `RegistrationRefused`."""
        ...

    def client(self, client_id: str) -> DevClient | None:
        """The client with this id, or None."""
        ...

    def put_code(self, code: str, stored: StoredCode) -> None:
        """Remember a new authorization code (its digest), valid for `CODE_TTL_SECONDS`."""
        ...

    def code(self, code: str, client_id: str) -> StoredCode | None:
        """An unused, unexpired code issued to `client_id`; a used one revokes its family (None)."""
        ...

    def redeem_code(self, code_sha256: str) -> bool:
        """Mark a code used: True for exactly one caller; a later caller revokes the family."""
        ...

    def put_refresh_token(self, token: str, grant: Grant, ttl_seconds: int) -> bool:
        """Store a refresh token of `grant.family`; False (and stored revoked) if the family is revoked."""
        ...

    def refresh_token(self, token: str) -> StoredRefreshToken | None:
        """A live refresh token; a rotated-out or revoked one revokes its family (None)."""
        ...

    def redeem_refresh_token(self, token_sha256: str) -> bool:
        """Rotate a refresh token out: True for exactly one caller; a later caller revokes the family."""
        ...

    def remember_access_token(self, jti: str, family: str, keep_until: float) -> bool:
        """Remember an access token minted for `family` until `keep_until` (epoch seconds), so that a
        replay revoking the family revokes it too. False if the family is revoked already: then
        the token is born revoked (listed by `revoked_access_tokens`)."""
        ...

    def revoked_access_tokens(self, limit: int) -> list[RevokedAccessToken]:
        """At most `limit` access tokens of revoked families, not yet handed to the resource server's
        revocation list and still unexpired (an outbox: written in the revoking transaction)."""
        ...

    def forget_access_tokens(self, jtis: Sequence[str]) -> None:
        """Drop these tokens from the outbox: the resource server's revocation list holds them now."""
        ...

    def admit_login(self, keys: Sequence[str], limits: LoginLimits) -> float:
        """One sign-in attempt for `keys` (a user, a client address): if any key is backed off,
        nothing is counted and the seconds it must still wait are returned; otherwise the attempt
        is counted against every key, in the same transaction, and 0 is returned."""
        ...

    def login_succeeded(self, *, reset: Sequence[str], uncount: Sequence[str]) -> None:
        """A sign-in succeeded: the `reset` keys (the user) start afresh, and the `uncount` keys (the
        address) take back the attempt `admit_login` counted."""
        ...


class KeyStorage(Protocol):
    """Where the signing keys' document lives. Every process of one deployment must reach the same one.

    Each storage has a version (the file's modification time, a counter in the row) by which a
    running server notices a rotation another process made.
    """

    def version(self) -> object | None:
        """Changes whenever the document does; None while there is no document yet."""
        ...

    def read(self) -> tuple[bytes, object]:
        """The document and its version."""
        ...

    def create(self, document: bytes) -> None:
        """Store `document` unless one exists already (then the existing one wins, so processes
        starting at once agree on one key)."""
        ...

    def update(self, change: Callable[[bytes], bytes]) -> None:
        """Replace the document with `change(current)`, atomically with respect to other updates."""
        ...
