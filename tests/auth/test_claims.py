"""The claim rules every verified token must meet, each refusal with its own reason."""

from __future__ import annotations

from typing import Any

import pytest

from aml_mcp.auth.claims import principal_from_claims
from aml_mcp.auth.errors import TokenRejected
from tests.auth.samples import RESOURCE, RULES, claims


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"aud": "HTTPS://AML.EXAMPLE/mcp"}, None),
        ({"aud": "https://aml.example/MCP"}, "wrong_audience"),
        ({"aud": ["x", RESOURCE]}, None),
        ({"aud": 7}, "wrong_audience"),
        ({"exp": 999_970}, "expired"),
        ({"exp": 999_990}, None),  # within leeway
        ({"exp": "soon"}, "malformed_token"),
        ({"exp": float("nan")}, "malformed_token"),
        ({"nbf": float("inf")}, "malformed_token"),
        ({"iat": None}, "missing_claim"),
        ({"client_id": None, "azp": "via-azp"}, None),
        ({"tenant": "a\nb"}, "missing_tenant"),
        ({"tenant": "x" * 300}, "missing_tenant"),
        ({"scope": ["aml:read", "aml:eval"]}, None),
        ({"scope": 5}, "missing_scope_claim"),
    ],
)
def test_claim_rules(overrides: dict[str, Any], reason: str | None) -> None:
    values = claims(**overrides)
    if reason is None:
        principal = principal_from_claims(values, RULES, issuer="iss", now=1_000_000, require_jti=True)
        assert principal.tenant == values["tenant"]
    else:
        with pytest.raises(TokenRejected) as refused:
            principal_from_claims(values, RULES, issuer="iss", now=1_000_000, require_jti=True)
        assert refused.value.reason == reason
