"""The resource server's settings (the `auth` group, `AML_MCP_AUTH__*`): whose tokens, how strictly.

Authentication is on unless switched off, and switching it off is only allowed on loopback (the
command line refuses anything else). The defaults fail closed: RFC 9068 `typ`, a `jti`, a tenant
claim and an audience naming this server are all required.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from aml_mcp.audit.anonymous import DEFAULT_MAX_DISTINCT, DEFAULT_WINDOW_SECONDS
from aml_mcp.audit.sinks import DEFAULT_FILE_BACKUPS, DEFAULT_FILE_MAX_BYTES
from aml_mcp.loopback import is_loopback_host

ALLOWED_ALGORITHMS: tuple[str, ...] = ("RS256", "PS256", "ES256", "EdDSA")
"""Asymmetric algorithms only: `none` and every HMAC algorithm are refused whatever the settings say."""


def require_secure_url(value: str, what: str) -> str:
    """An absolute URL that is https, or http on a loopback host (local development and tests)."""
    parts = urlsplit(value)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError(f"{what} must be an absolute http(s) URL: {value!r}")
    if parts.fragment or parts.query:
        raise ValueError(f"{what} must not carry a query or fragment: {value!r}")
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        raise ValueError(f"{what} must use https unless it is on loopback: {value!r}")
    return value


def claim_path(value: str) -> str:
    """A claim name or a dotted path (no empty name between dots), at most 256 characters."""
    if not value or len(value) > 256 or any(not part.strip() for part in value.split(".")):
        raise ValueError(f"a claim is a name or a dotted path of non-empty names: {value!r}")
    return value


class _Group(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)


class IssuerSettings(_Group):
    """One trusted authorization server whose JWT access tokens this server accepts."""

    issuer: str
    """Exact `iss` value (compared as a plain string, RFC 8414 §3.3); https unless on loopback."""
    jwks_uri: str | None = None
    """Where its signing keys are, for an issuer that publishes no metadata naming them.

    Default: the `jwks_uri` of its RFC 8414 / OpenID metadata.
    """
    algorithms: list[str] = Field(default_factory=lambda: list(ALLOWED_ALGORITHMS))
    """Signature algorithms accepted from this issuer (a subset of RS256, PS256, ES256, EdDSA)."""
    token_types: list[str] = Field(default_factory=lambda: ["at+jwt", "application/at+jwt"])
    """Accepted JOSE `typ` values. RFC 9068 requires `at+jwt`; add `JWT` only for an issuer that
    does not follow the profile (the audience check still keeps its ID tokens out)."""
    require_jti: bool = True
    """Refuse tokens without a `jti` (RFC 9068 requires one; revocation by token id needs it)."""

    @field_validator("issuer", "jwks_uri")
    @classmethod
    def _secure(cls, value: str | None) -> str | None:
        return None if value is None else require_secure_url(value, "issuer URL")

    @field_validator("algorithms")
    @classmethod
    def _allowed(cls, value: list[str]) -> list[str]:
        unknown = [alg for alg in value if alg not in ALLOWED_ALGORITHMS]
        if unknown or not value:
            raise ValueError(f"algorithms must be a non-empty subset of {list(ALLOWED_ALGORITHMS)}")
        return value


class IntrospectionSettings(_Group):
    """RFC 7662 introspection for opaque (non-JWT) access tokens."""

    endpoint: str
    """The RFC 7662 introspection endpoint; https unless on loopback."""
    issuer: str
    """The issuer active answers are attributed to; an answer naming another `iss` is refused."""
    client_id: str
    """This server's client id at the introspection endpoint (HTTP Basic authentication)."""
    client_secret: SecretStr
    """This server's client secret there; set it in the environment to keep it out of files."""
    cache_seconds: float = Field(default=60.0, ge=0)
    """Upper bound on how long an answer is reused; never beyond the token's own `exp`."""
    timeout_seconds: float = Field(default=5.0, gt=0)
    """How long one introspection request may take; an endpoint that does not answer in time (or at all)
    makes the request fail with 503, never pass."""

    @field_validator("endpoint", "issuer")
    @classmethod
    def _secure(cls, value: str) -> str:
        return require_secure_url(value, "introspection URL")


class ResourceServerSettings(_Group):
    """Settings of the OAuth 2.1 resource server: whose tokens it trusts and how strictly it checks them."""

    enabled: bool = True
    """Require a bearer token on `/mcp`. `serve` refuses a non-loopback host with this off (tests and the
    conformance fixtures run without)."""
    issuers: list[IssuerSettings] = Field(default_factory=list)
    """Trusted external issuers, each an object with the fields below (a JSON list in the environment).
    The development issuer is trusted besides these while it is on."""
    tenant_claim: str = "tenant"
    """The (required) claim that carries the caller's tenant (bank): a claim name, or a dotted path
    into nested objects (`org.bank` reads `{"org": {"bank": "..."}}`). A claim whose own name is
    exactly this, dots and all, is read first, so URL-named claims such as
    `https://aml.bank.example/tenant` work as written. Its value is a string or a list of exactly
    one string; a list naming several banks, an object or a number is refused (`malformed_claim`)."""
    subject_claim: str = "sub"
    """The claim that names the caller (the subject of tasks, audit records and revocation): a claim
    name or a dotted path, as for `tenant_claim`, holding a string. `oid` for Entra ID (its `sub`
    differs per application), `preferred_username` where the bank wants readable names; the
    development issuer's tokens carry `sub` only."""
    scope_claims: list[str] = Field(default_factory=lambda: ["scope", "scp"])
    """Claims that may carry the granted scopes, in order: the first one present is read, as a
    space-separated string or a list of strings (`scope` per RFC 9068; `scp` for Entra ID, a
    string there, and Okta, a list). A JSON list in the environment."""
    client_claims: list[str] = Field(default_factory=lambda: ["client_id", "azp"])
    """Claims that may name the client, in order: the first one present is read (`client_id` per
    RFC 9068, `azp` for OpenID providers, `cid` for Okta, `appid` for Entra ID v1 tokens). A JSON
    list in the environment."""
    leeway_seconds: int = Field(default=30, ge=0, le=300)
    """Clock skew tolerated on `exp`, `nbf` and `iat`."""
    scope_hierarchy: dict[str, list[str]] | None = None
    """A granted scope (key) implies the listed ones, transitively. A JSON object in the environment.

    Default: the served catalog's; for the AML tools `{"aml:admin": ["aml:read", "aml:eval", "aml:draft"]}`.
    """
    scopes_supported: list[str] | None = None
    """`scopes_supported` in the protected resource metadata (RFC 9728), which clients ask for.

    Default: every tool's scope in the served catalog (for the AML tools `aml:draft`, `aml:eval`,
    `aml:read`).
    """
    resource_name: str = "AML MCP server"
    """`resource_name` in the protected resource metadata: the name a client may show the user."""
    jwks_cache_seconds: float = Field(default=600.0, ge=1)
    """How long fetched keys are used before they are fetched again, and how long a remembered
    verification (`verified_token_cache_size`) is trusted before the token's signature is checked
    again: a key the issuer withdraws stops working within this time, even for a token in use."""
    jwks_refetch_interval_seconds: float = Field(default=30.0, ge=0)
    """Minimum time between two refetches caused by an unknown `kid` (per issuer)."""
    verified_token_cache_size: Annotated[int, Field(ge=0)] = 10_000
    """Verified tokens remembered (by SHA-256, until they expire) so a repeat costs no signature check;
    0 verifies every request."""
    revocation_refresh_seconds: float = Field(default=2.0, gt=0)
    """How often a running server re-reads the revocation list, so `aml-mcp revoke` reaches it."""
    audit_file: bool = True
    """Also append audit events as JSON lines to DATA_DIR/audit.jsonl."""
    audit_to_log: bool = False
    """Also emit audit events on the `aml_mcp.audit` logger."""
    audit_fail_open: bool = False
    """Keep admitting calls while the audit trail cannot be written (a full disk, an unwritable
    file or table). Off by default: /mcp then answers 503 and /readyz reports `audit_unavailable` until
    the retried writes succeed again (within about 2 s of the fault clearing); the events of that
    time are kept and written then. Turn on only where availability outranks the audit record."""
    audit_file_max_bytes: int = Field(default=DEFAULT_FILE_MAX_BYTES, ge=0)
    """Rotate DATA_DIR/audit.jsonl before it grows past this size (to audit.jsonl.1, .2, ...).
    0 = never rotate in the server: an external tool may rename the file, and the server reopens
    the path by itself (no signal needed, no copytruncate)."""
    audit_file_backups: int = Field(default=DEFAULT_FILE_BACKUPS, ge=1, le=1000)
    """Rotated audit files kept (audit.jsonl.1 ... .N); the oldest is deleted. The store's table
    keeps every event regardless."""
    audit_anonymous_window_seconds: float = Field(default=DEFAULT_WINDOW_SECONDS, ge=0, le=3600)
    """Refusals of unauthenticated requests with the same reason, method and target within this
    window after the first are counted into one summary record (`detail.aggregated.count`)
    instead of one record each. 0 = record every one. Allowed calls and refusals of a verified
    caller are always recorded one by one."""
    audit_anonymous_max_distinct: int = Field(default=DEFAULT_MAX_DISTINCT, ge=1, le=100_000)
    """Kinds (reason, method, target) of anonymous refusal recorded on their own per window;
    further kinds are folded into one summary per reason, so varying the request does not
    defeat the limit."""
    audit_flush_seconds: float = Field(default=0.1, gt=0, le=10)
    """How often queued audit events are handed to the table and the file. Recording never waits
    for this; it bounds how long an event takes to become visible to `aml-mcp audit tail`."""

    @field_validator("tenant_claim", "subject_claim")
    @classmethod
    def _claim_path(cls, value: str) -> str:
        return claim_path(value)

    @field_validator("scope_claims", "client_claims")
    @classmethod
    def _claim_paths(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("name at least one claim")
        return [claim_path(name) for name in value]

    introspection: IntrospectionSettings | None = None
    """RFC 7662 introspection for opaque (non-JWT) access tokens, with the fields below. Answers are cached
    by token digest, never past the token's `exp`.

    Default: none, so an opaque token is refused.
    """
