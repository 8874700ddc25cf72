"""Claim mapping for identity providers that are not shaped like the development issuer.

The tenant may sit in a nested claim (a dotted path) or come as a list of one; scopes may arrive as
`scope` or `scp`, the client as `client_id`, `azp` or `cid`, and the subject as `oid` or
`preferred_username`. Whatever the settings say, a claim of the wrong shape (two banks, an object
where a string belongs, a number) is refused with its own reason, never guessed at — and through the
gate that refusal is a 401 in the audit trail, never a 500.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from aml_mcp.auth.claims import ClaimRules, claim_at, principal_from_claims
from aml_mcp.auth.errors import TokenRejected
from aml_mcp.auth.settings import ResourceServerSettings
from tests.auth.samples import RESOURCE, claims
from tests.support.audit_trail import READ_TOOL, read_catalog
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server

NOW = 1_000_000
MAPPED = ClaimRules(
    resource=RESOURCE,
    tenant_claim="org.bank",
    leeway_seconds=30,
    subject_claim="oid",
    scope_claims=("scope", "scp"),
    client_claims=("client_id", "azp", "cid"),
)


def principal(rules: ClaimRules, **overrides: Any) -> Any:
    return principal_from_claims(claims(**overrides), rules, issuer="iss", now=NOW, require_jti=True)


def refusal(rules: ClaimRules, **overrides: Any) -> TokenRejected:
    with pytest.raises(TokenRejected) as refused:
        principal(rules, **overrides)
    return refused.value


# -- where each claim is read from ------------------------------------------------------------------


def test_claim_at_reads_an_exact_name_first_then_a_dotted_path() -> None:
    nested = {"org": {"bank": "meridian-bank", "unit": {"desk": "fiu"}}}
    assert claim_at(nested, "org.bank") == "meridian-bank"
    assert claim_at(nested, "org.unit.desk") == "fiu"
    assert claim_at({"org.bank": "flat", **nested}, "org.bank") == "flat"
    url = "https://aml.bank.example/tenant"
    assert claim_at({url: "harbour-trust"}, url) == "harbour-trust"
    assert claim_at(nested, "org.nothing") is None
    assert claim_at({"org": "a string"}, "org.bank") is None  # no path through a non-object
    assert claim_at({"org": ["bank"]}, "org.bank") is None
    assert claim_at({"tenant": None}, "tenant") is None


def test_a_nested_tenant_an_oid_subject_and_an_scp_list_make_the_principal() -> None:
    mapped = principal(
        MAPPED, tenant=None, sub="pairwise-xyz", oid="7d1c-oid", org={"bank": "meridian-bank"},
        scope=None, scp=["aml:read", "aml:eval"],
    )  # fmt: skip
    assert (mapped.subject, mapped.tenant) == ("7d1c-oid", "meridian-bank")
    assert mapped.scopes == frozenset({"aml:read", "aml:eval"})


def test_a_tenant_list_of_one_is_that_tenant() -> None:
    rules = ClaimRules(resource=RESOURCE, tenant_claim="tenant", leeway_seconds=30)
    assert principal(rules, tenant=["harbour-trust"]).tenant == "harbour-trust"


def test_scp_may_be_a_space_separated_string_and_scope_comes_first() -> None:
    assert principal(MAPPED, org={"bank": "b"}, oid="o", scope=None, scp="aml:read aml:draft").scopes == {
        "aml:read",
        "aml:draft",
    }
    both = principal(MAPPED, org={"bank": "b"}, oid="o", scope="aml:read", scp=["aml:admin"])
    assert both.scopes == frozenset({"aml:read"})


def test_the_client_is_the_first_client_claim_present() -> None:
    okta = principal(MAPPED, org={"bank": "b"}, oid="o", client_id=None, cid="0oa-okta")
    assert okta.client_id == "0oa-okta"
    rfc = principal(MAPPED, org={"bank": "b"}, oid="o", client_id="c", azp="other", cid="third")
    assert rfc.client_id == "c"


# -- hostile shapes: refused with a reason, never a value picked --------------------------------------


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"tenant": ["meridian-bank", "harbour-trust"]}, "malformed_claim"),
        ({"tenant": {"id": "meridian-bank"}}, "malformed_claim"),
        ({"tenant": 42}, "malformed_claim"),
        ({"tenant": True}, "malformed_claim"),
        ({"tenant": [7]}, "malformed_claim"),
        ({"tenant": [["meridian-bank"]]}, "malformed_claim"),
        ({"tenant": []}, "missing_tenant"),
        ({"tenant": [""]}, "missing_tenant"),
        ({"tenant": ["x" * 300]}, "missing_tenant"),
        ({"tenant": ["bank\u202e"]}, "unsafe_identity"),
        ({"sub": {"name": "alice"}}, "malformed_claim"),
        ({"sub": ["alice"]}, "malformed_claim"),
        ({"client_id": 12}, "malformed_claim"),
        ({"scope": {"aml:read": True}}, "malformed_claim"),
        ({"scope": ["aml:read", 3]}, "malformed_claim"),
    ],
)
def test_hostile_shapes_are_refused_with_their_own_reason(overrides: dict[str, Any], reason: str) -> None:
    rules = ClaimRules(resource=RESOURCE, tenant_claim="tenant", leeway_seconds=30)
    refused = refusal(rules, **overrides)
    assert refused.reason == reason
    assert "meridian-bank" not in refused.description and "alice" not in refused.description


def test_a_nested_object_where_the_mapped_tenant_should_be_is_refused() -> None:
    refused = refusal(MAPPED, oid="o", org={"bank": {"name": "meridian-bank"}})
    assert refused.reason == "malformed_claim"
    assert refused.description == "token 'org.bank' claim is an object; a string is needed"
    assert refusal(MAPPED, oid="o", org={"bank": ["a", "b"]}).description == (
        "token 'org.bank' claim is a list of 2 values; exactly one tenant is needed"
    )


def test_missing_mapped_claims_name_the_claim_looked_for() -> None:
    assert refusal(MAPPED, org={"bank": "b"}).description == "token has no usable 'oid' claim"
    assert refusal(MAPPED, oid="o").reason == "missing_tenant"
    gone = refusal(MAPPED, oid="o", org={"bank": "b"}, scope=None)
    assert (gone.reason, gone.description) == ("missing_scope_claim", "token has no 'scope' claim")


# -- the settings ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "org..bank", ".bank", "bank.", " ", "x" * 257])
def test_a_claim_setting_must_be_a_name_or_a_dotted_path(bad: str) -> None:
    with pytest.raises(ValueError, match="dotted path"):
        ResourceServerSettings(tenant_claim=bad)
    with pytest.raises(ValueError, match="dotted path"):
        ResourceServerSettings(scope_claims=["scope", bad])


def test_claim_lists_must_name_at_least_one_claim() -> None:
    with pytest.raises(ValueError, match="at least one claim"):
        ResourceServerSettings(client_claims=[])


def test_the_defaults_read_what_rfc_9068_and_openid_providers_write() -> None:
    settings = ResourceServerSettings()
    assert (settings.tenant_claim, settings.subject_claim) == ("tenant", "sub")
    assert settings.scope_claims == ["scope", "scp"] and settings.client_claims == ["client_id", "azp"]


# -- through the gate: 401 and an audit record, never a 500 -------------------------------------------


@pytest.fixture(scope="module")
def mapped(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    auth = auth_settings(
        [issuer], tenant_claim="org.bank", subject_claim="preferred_username", scope_claims=["scp"]
    )
    data_dir = tmp_path_factory.mktemp("claim-mapping")
    with secured_server(data_dir, read_catalog(), issuer=issuer, auth=auth) as running:
        yield running


@pytest.mark.parametrize(
    ("shape", "status", "reason"),
    [
        ({"org": {"bank": "meridian-bank"}, "preferred_username": "alice", "scp": ["aml:read"]}, 200, "ok"),
        ({"org": {"bank": ["meridian-bank"]}, "preferred_username": "alice", "scp": "aml:read"}, 200, "ok"),
        ({"org": {"bank": ["meridian-bank", "harbour-trust"]}, "preferred_username": "alice",
          "scp": ["aml:read"]}, 401, "malformed_claim"),
        ({"org": {"bank": {"id": "meridian-bank"}}, "preferred_username": "alice", "scp": ["aml:read"]}, 401,
         "malformed_claim"),
        ({"org": {"bank": 7}, "preferred_username": "alice", "scp": ["aml:read"]}, 401, "malformed_claim"),
        ({"org": {"bank": "meridian-bank"}, "preferred_username": ["alice"], "scp": ["aml:read"]}, 401,
         "malformed_claim"),
        ({"org": {"bank": "meridian-bank"}, "preferred_username": "alice", "scp": 1}, 401, "malformed_claim"),
        ({"org": {"bank": "meridian-bank"}, "scp": ["aml:read"]}, 401, "missing_subject"),
        ({"org": {"bank": "meridian-bank"}, "preferred_username": "alice"}, 401, "missing_scope_claim"),
    ],
)  # fmt: skip
def test_mapped_claims_through_the_gate(
    mapped: SecuredServer, shape: dict[str, Any], status: int, reason: str
) -> None:
    mark = mapped.audit_mark()
    token = mapped.mint(subject="pairwise-1", remove=["tenant", "scope"], **shape)
    answer = mapped.post("tools/call", {"name": READ_TOOL, "arguments": {}}, token=token)
    assert answer.status_code == status, answer.text
    event = mapped.wait_for_audit(since=mark, reason=reason)
    if status == 401:
        assert 'error="invalid_token"' in answer.headers["www-authenticate"]
        assert event["decision"] == "deny"
    else:
        assert answer.json()["result"]["content"][0]["text"] == "alice"
        assert (event["subject"], event["tenant"]) == ("alice", "meridian-bank")
