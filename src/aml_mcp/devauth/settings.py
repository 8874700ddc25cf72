"""The development authorization server's settings (`AML_MCP_AUTH__DEV__*`)."""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class DevAuthSettings(BaseModel):
    """The development authorization server mounted in the same app (never for production)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    enabled: bool = True
    """Run the development authorization server (demo users, open client registration). Loopback only:
    `serve` refuses a non-loopback host while it is on, so switch it off in production. Nothing runs while
    `auth.enabled` is off."""
    path: str = "/oauth"
    """Mount point; the issuer is the server's base URL plus this path."""
    access_token_ttl_seconds: int = Field(default=900, ge=30, le=86_400)
    """Lifetime of the access tokens it issues."""
    refresh_token_ttl_seconds: int = Field(default=86_400, ge=60)
    """Lifetime of its refresh tokens, which are rotated on every use."""
    client_credentials_tenant: str = "meridian-bank"
    """Tenant claim for tokens of the pre-registered service client (client credentials grant)."""

    max_body_bytes: int = Field(default=65_536, ge=1_024, le=1_048_576)
    """Largest request body any `/oauth/*` endpoint reads (token and consent forms, registrations).
    Larger bodies are refused with 413 before they are read, so anonymous callers cannot make the
    issuer buffer or store megabytes."""
    max_client_name_chars: int = Field(default=200, ge=1, le=10_000)
    """Longest `client_name` dynamic registration accepts (it is shown on the consent page)."""
    max_redirect_uris: int = Field(default=10, ge=1, le=1_000)
    """Most `redirect_uris` one registered client (or Client ID Metadata Document) may list."""
    max_redirect_uri_chars: int = Field(default=2_000, ge=32, le=65_536)
    """Longest redirect URI a client may register."""
    max_registered_clients: int = Field(default=1_000, ge=1)
    """Dynamic registration stops (403) once this many clients have registered themselves, so
    anonymous registrations cannot grow the issuer's store (`devauth.db`, or its PostgreSQL tables)
    without bound; the count holds across replicas. Pre-registered clients do not count."""
    max_registrations_per_minute: int = Field(default=30, ge=1)
    """Dynamic registrations accepted in any 60-second window; more get 429 with `Retry-After`."""

    login_max_failures_per_user: int = Field(default=5, ge=1)
    """Password attempts one demo user may be tried with before each further attempt must wait a
    backoff (429 with `Retry-After`, the password not even checked). A successful sign-in resets the
    count. Counted in the issuer's store, so the same on every replica."""
    login_max_failures_per_address: int = Field(default=20, ge=1)
    """Password attempts (for any user, or none that exists) one client address may make before the
    backoff applies to it. Successful sign-ins do not count. Behind a load balancer every client has
    the balancer's address."""
    login_backoff_base_seconds: float = Field(default=1.0, gt=0, le=60)
    """The first backoff, once a user or address has used its attempts; it doubles with each further
    failure."""
    login_backoff_max_seconds: float = Field(default=300.0, gt=0, le=86_400)
    """The longest backoff."""
    login_failure_memory_seconds: float = Field(default=3_600.0, gt=0)
    """A user or address whose last attempt is this old starts counting afresh (its entry is deleted)."""
    login_limiter_max_entries: int = Field(default=10_000, ge=100)
    """Most users and addresses the limiter remembers at once; the least recently seen go first."""

    client_metadata_timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    """Total time a Client ID Metadata Document fetch may take, from waiting for a fetch slot and
    resolving the host to the last byte of the body (a deadline for the whole fetch, not per phase)."""
    client_metadata_max_bytes: int = Field(default=65_536, ge=1_024, le=1_048_576)
    """Largest Client ID Metadata Document accepted. The body is streamed and the fetch stops at this
    many bytes; compressed bodies are refused (the request asks for `identity`), so nothing inflates."""
    client_metadata_concurrency: int = Field(default=4, ge=1, le=64)
    """Client ID Metadata Document fetches in flight at once. They have their own limiter (and
    their own threads for host resolution), so anonymous fetches never occupy the worker threads that
    search, the database readers and the revocation refresh depend on."""
    client_metadata_cache_seconds: float = Field(default=300.0, ge=0)
    """How long a fetched, valid document is reused."""
    client_metadata_failure_cache_seconds: float = Field(default=60.0, ge=0)
    """How long a failed fetch (unreachable, refused destination, too large, invalid) is remembered,
    so the same URL named again is refused without another fetch."""
    client_metadata_cache_entries: int = Field(default=1_024, ge=1)
    """Most documents (valid or failed) remembered at once; the least recently used are dropped."""

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or "?" in value or "#" in value:
            raise ValueError("dev auth path must look like /oauth")
        return value

    @model_validator(mode="after")
    def _backoff_within_memory(self) -> Self:
        if self.login_failure_memory_seconds < self.login_backoff_max_seconds:
            raise ValueError(
                "login_failure_memory_seconds must be at least login_backoff_max_seconds"
                " (a backoff would otherwise end early, when its entry is forgotten)"
            )
        return self
