"""The claim rules every verified token must meet, each refusal with its own reason."""

from __future__ import annotations

from typing import Any

import pytest

from aml_mcp.auth.claims import principal_from_claims, unsafe_character
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
        ({"tenant": "a\nb"}, "unsafe_identity"),
        ({"sub": "car\u202eol\u200b"}, "unsafe_identity"),
        ({"client_id": "c\x85"}, "unsafe_identity"),
        ({"client_id": None, "azp": "via\u2066azp"}, "unsafe_identity"),
        ({"jti": "j\ufeff"}, "unsafe_identity"),
        ({"scope": ["aml:read", "aml\u200d:eval"]}, "unsafe_identity"),
        ({"sub": "zoë", "tenant": "銀行"}, None),
        ({"tenant": "x" * 300}, "missing_tenant"),
        ({"scope": ["aml:read", "aml:eval"]}, None),
        ({"scope": 5}, "malformed_claim"),
        ({"scope": None}, "missing_scope_claim"),
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


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("alice", None),
        ("José Müller", None),
        ("e\u0301", None),  # a combining accent is visible
        ("a\tb", "a control character (U+0009)"),
        ("del\x7f", "a control character (U+007F)"),
        ("c1\x9b", "a control character (U+009B)"),
        ("car\u202eol", "a bidi control (U+202E)"),
        ("\u2067x", "a bidi control (U+2067)"),
        ("arabic\u061cmark", "a bidi control (U+061C)"),
        ("zero\u200bwidth", "an invisible formatting character (U+200B)"),
        ("word\u2060joiner", "an invisible formatting character (U+2060)"),
        ("\ufeffbom", "an invisible formatting character (U+FEFF)"),
        ("line\u2028break", "a line separator (U+2028)"),
        ("para\u2029break", "a paragraph separator (U+2029)"),
    ],
)
def test_unsafe_characters_are_named_by_kind_and_code_point(text: str, what: str | None) -> None:
    assert unsafe_character(text) == what
