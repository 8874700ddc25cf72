"""A resource, its claim rules and a well-formed claim set, for tests of the verifier's parts."""

from __future__ import annotations

from typing import Any

from aml_mcp.auth.claims import ClaimRules

RESOURCE = "https://aml.example/mcp"
RULES = ClaimRules(resource=RESOURCE, tenant_claim="tenant", leeway_seconds=30)


def claims(**overrides: Any) -> dict[str, Any]:
    """Valid claims at `now=1_000_000` for RESOURCE; an override of `None` removes the claim."""
    values = {
        "aud": RESOURCE,
        "sub": "alice",
        "client_id": "c",
        "tenant": "bank-a",
        "scope": "aml:read",
        "iat": 999_990,
        "exp": 1_000_300,
        "jti": "j",
    }
    values.update(overrides)
    return {k: v for k, v in values.items() if v is not None}
