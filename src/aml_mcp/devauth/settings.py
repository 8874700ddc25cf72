"""The development authorization server's settings (`AML_MCP_AUTH__DEV__*`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


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

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or value.endswith("/") or "?" in value or "#" in value:
            raise ValueError("dev auth path must look like /oauth")
        return value
