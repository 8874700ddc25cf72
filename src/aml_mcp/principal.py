"""The verified caller, as the auth layer hands it to tools, tasks and streams.

The raw token never travels past the auth layer; everything downstream sees only this.
Ownership of durable state is the four-part `Owner`, kept as separate fields so no
separator character in a claim can make two different callers look alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Owner:
    """Who owns a task or a stream: issuer and subject, within a tenant, through a client."""

    issuer: str
    subject: str
    tenant: str
    client_id: str


@dataclass(frozen=True, slots=True)
class Principal:
    """A caller whose credentials have been verified for this request."""

    issuer: str
    subject: str
    tenant: str
    client_id: str
    scopes: frozenset[str] = field(default_factory=frozenset)
    expires_at: float | None = None
    """Epoch seconds after which the credential is no longer valid; `None` never expires."""
    token_id: str | None = None
    """The credential's `jti`, used for revocation; never the token itself."""
    simulated: bool = False
    """The token carries `SIMULATED_CLAIM`: the lab's simulation minted it to demonstrate one refusal."""

    @property
    def owner(self) -> Owner:
        return Owner(self.issuer, self.subject, self.tenant, self.client_id)


SIMULATED_CLAIM = "aml-mcp/simulated"
"""Marks a token the lab's authorization simulation minted for one in-process request. Such a token
never leaves the server; should one ever escape, the gate still refuses it every request that could
succeed (it may only be refused, or look up a task and be told it does not exist)."""


LOCAL_PRINCIPAL = Principal(
    issuer="urn:aml-mcp:local",
    subject="local",
    tenant="local",
    client_id="local",
)
"""The caller on a loopback server running with authentication switched off (tests, conformance)."""


PRINCIPAL_SCOPE_KEY = "aml_mcp.principal"
"""Where the HTTP layer leaves the verified principal in the ASGI scope for the protocol layer."""


def principal_in(scope: Mapping[str, Any]) -> Principal:
    """The principal the HTTP layer verified for this request; fails closed if there is none."""
    principal = scope.get(PRINCIPAL_SCOPE_KEY)
    if not isinstance(principal, Principal):
        raise LookupError("no verified principal on this request")
    return principal
