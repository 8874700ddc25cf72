"""The lab's settings (`AML_MCP_LAB__*`)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class LabSettings(BaseModel):
    """The `/lab` web page (see `aml_mcp.lab`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    enabled: bool | None = None
    """Serve the lab at `/lab`. Needs `auth.enabled`: the page signs in like any client.

    Default: on exactly when the development authorization server is on, so a production server (dev
    issuer off) does not grow a web page unless this is set to `true` explicitly."""
    simulation: bool = True
    """Serve the lab's authorization simulation; it needs the development authorization server.

    A server reachable under a non-loopback name (`host` or `public_url`) must have it off: `serve`
    refuses to start otherwise."""
    client_id: str = "aml-mcp-lab"
    """The OAuth client the page signs in as (public client, authorization code + PKCE). The development
    authorization server pre-registers it with the page's own address as its redirect URI; with another
    authorization server, register it there."""
    audit_scope: str = "aml:admin"
    """Scope the audit view needs; it only ever shows the caller's own bank's events."""
    audit_page_size: int = Field(default=100, ge=1, le=1_000)
    """Most audit events one poll of the audit view returns."""
    simulation_runs_per_minute: int = Field(default=30, ge=1, le=600)
    """Most authorization simulations one caller may run per minute on one server process (each
    signs a token and serves a request); past it the simulation answers 429 with `Retry-After`."""
