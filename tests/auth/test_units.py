"""The resource server's parts on their own: hierarchy, key cache, verification cache, introspection,
claims, settings, audit — the properties that are awkward to provoke over HTTP (clocks, failures)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec
from pydantic import ValidationError

from aml_mcp.audit import AuditEvent, AuditLog, Decision
from aml_mcp.audit.sinks import JsonLinesSink
from aml_mcp.auth.claims import ClaimRules, principal_from_claims
from aml_mcp.auth.errors import TokenRejected, VerifierUnavailable
from aml_mcp.auth.introspection import IntrospectionVerifier
from aml_mcp.auth.jwks import IssuerKeys, metadata_urls
from aml_mcp.auth.redaction import CredentialRedactingFilter
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.settings import IntrospectionSettings, IssuerSettings
from aml_mcp.auth.verifier import TokenVerifier
from aml_mcp.cli.serve import serve_refusal
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.principal import Principal
from tests.support.oauth import IssuerKey

RESOURCE = "https://aml.example/mcp"
RULES = ClaimRules(resource=RESOURCE, tenant_claim="tenant", leeway_seconds=30)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_scope_hierarchy_is_transitive_and_survives_cycles() -> None:
    hierarchy = ScopeHierarchy({"admin": ["lead"], "lead": ["read", "draft"], "read": ["admin"]})
    assert hierarchy.effective({"admin"}) == {"admin", "lead", "read", "draft"}
    assert not hierarchy.missing(frozenset({"lead"}), frozenset({"draft"}))
    assert hierarchy.missing(frozenset({"draft"}), frozenset({"read", "draft"})) == {"read"}


def _jwks(*kids: str) -> dict[str, Any]:
    return {"keys": [IssuerKey(kid, "ES256", _EC).public_jwk() for kid in kids]}


_EC = ec.generate_private_key(ec.SECP256R1())


@pytest.mark.anyio
async def test_unknown_kid_refetches_at_most_once_per_interval() -> None:
    clock = Clock()
    published = ["a"]
    calls = 0

    async def fetch() -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        return _jwks(*published)

    keys = IssuerKeys("iss", fetch, cache_seconds=600, refetch_interval=30, clock=clock)
    assert await keys.candidates("a", "ES256") and calls == 1
    clock.now += 31
    assert not await keys.candidates("nope", "ES256") and calls == 2  # one refetch ...
    for _ in range(20):
        assert not await keys.candidates("nope-too", "ES256")
    assert calls == 2  # ... and no more within the interval
    published.append("b")
    clock.now += 31
    assert await keys.candidates("b", "ES256") and calls == 3  # rotation picked up
    assert not await keys.candidates("a", "RS256")  # an EC key never checks an RSA signature


@pytest.mark.anyio
async def test_key_fetch_failures_fail_closed_without_hammering_the_issuer() -> None:
    clock = Clock()
    calls = 0
    healthy = False

    async def fetch() -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        if not healthy:
            raise httpx.ConnectError("down")
        return _jwks("a")

    keys = IssuerKeys("iss", fetch, cache_seconds=60, refetch_interval=10, clock=clock)
    with pytest.raises(VerifierUnavailable):
        await keys.candidates("a", "ES256")
    with pytest.raises(VerifierUnavailable):
        await keys.candidates("a", "ES256")
    assert calls == 1
    healthy = True
    clock.now += 11
    assert await keys.candidates("a", "ES256")
    healthy = False
    clock.now += 61  # stale; the refetch fails; the old keys stay in use
    assert await keys.candidates("a", "ES256")


def test_metadata_urls_follow_rfc8414_path_insertion() -> None:
    assert metadata_urls("https://id.example/tenant1") == [
        "https://id.example/.well-known/oauth-authorization-server/tenant1",
        "https://id.example/.well-known/openid-configuration/tenant1",
        "https://id.example/tenant1/.well-known/openid-configuration",
    ]
    assert (
        metadata_urls("https://id.example")[0] == "https://id.example/.well-known/oauth-authorization-server"
    )


class CountingVerifier:
    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.calls = 0

    async def verify(self, token: str) -> Principal:
        self.calls += 1
        return self.principal


@pytest.mark.anyio
async def test_verified_tokens_are_remembered_until_they_expire() -> None:
    clock = Clock()
    principal = Principal("iss", "sub", "t", "c", expires_at=clock.now + 60)
    inner = CountingVerifier(principal)
    verifier = TokenVerifier(inner, cache_size=2, clock=clock)
    for _ in range(5):
        assert await verifier.verify("a.b.c") == principal
    assert inner.calls == 1
    clock.now += 61
    await verifier.verify("a.b.c")
    assert inner.calls == 2  # expired entries are verified again (and refused there)
    await verifier.verify("d.e.f")
    await verifier.verify("g.h.i")
    await verifier.verify("a.b.c")
    assert inner.calls == 5  # bounded: the oldest entry was evicted
    with pytest.raises(TokenRejected):
        await verifier.verify("opaque-token")  # no introspection configured


def _claims(**overrides: Any) -> dict[str, Any]:
    claims = {
        "aud": RESOURCE,
        "sub": "alice",
        "client_id": "c",
        "tenant": "bank-a",
        "scope": "aml:read",
        "iat": 999_990,
        "exp": 1_000_300,
        "jti": "j",
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


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
    claims = _claims(**overrides)
    if reason is None:
        principal = principal_from_claims(claims, RULES, issuer="iss", now=1_000_000, require_jti=True)
        assert principal.tenant == claims["tenant"]
    else:
        with pytest.raises(TokenRejected) as refused:
            principal_from_claims(claims, RULES, issuer="iss", now=1_000_000, require_jti=True)
        assert refused.value.reason == reason


def _introspection(
    answers: dict[str, dict[str, Any]], clock: Clock
) -> tuple[IntrospectionVerifier, list[str]]:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        token = dict(httpx.QueryParams(request.content.decode()))["token"]
        seen.append(token)
        assert request.headers["authorization"].startswith("Basic ")
        return httpx.Response(200, json=answers.get(token, {"active": False}))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    settings = IntrospectionSettings(
        endpoint="https://id.example/introspect",
        issuer="https://id.example",
        client_id="rs",
        client_secret="s",
    )
    return IntrospectionVerifier(settings, RULES, lambda: client, clock=clock), seen


@pytest.mark.anyio
async def test_introspection_answers_are_checked_and_cached_no_longer_than_the_token_lives() -> None:
    clock = Clock()
    active = {**_claims(exp=clock.now + 20), "active": True}
    verifier, seen = _introspection(
        {
            "good": active,
            "foreign": {**active, "aud": "https://weather.example/mcp"},
            "other-iss": {**active, "iss": "https://evil.example"},
        },
        clock,
    )
    assert (await verifier.verify("good")).subject == "alice"
    assert (await verifier.verify("good")).subject == "alice"
    assert seen == ["good"]
    clock.now += 21  # past the token's exp: the cached answer is not reused (asked again; leeway holds)
    await verifier.verify("good")
    assert seen == ["good", "good"]
    clock.now += 30  # and past the leeway it is refused
    with pytest.raises(TokenRejected) as expired:
        await verifier.verify("good")
    assert expired.value.reason == "expired"
    for token, reason in [
        ("foreign", "wrong_audience"),
        ("other-iss", "wrong_issuer"),
        ("dead", "inactive_token"),
    ]:
        with pytest.raises(TokenRejected) as refused:
            await verifier.verify(token)
        assert refused.value.reason == reason


@pytest.mark.anyio
async def test_introspection_outage_is_unavailable_not_invalid() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500)

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    settings = IntrospectionSettings(
        endpoint="https://id.example/introspect",
        issuer="https://id.example",
        client_id="rs",
        client_secret="s",
    )
    with pytest.raises(VerifierUnavailable):
        await IntrospectionVerifier(settings, RULES, lambda: client).verify("tok")


@pytest.mark.parametrize(
    "issuer",
    [
        {"issuer": "http://id.example"},  # plain http off loopback
        {"issuer": "https://id.example", "algorithms": ["HS256"]},
        {"issuer": "https://id.example", "algorithms": ["none"]},
        {"issuer": "https://id.example", "jwks_uri": "https://id.example/keys#frag"},
    ],
)
def test_unsafe_issuer_settings_are_refused(issuer: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        IssuerSettings(**issuer)


def test_settings_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AML_MCP_AUTH__TENANT_CLAIM", "https://aml.example/bank")
    monkeypatch.setenv("AML_MCP_AUTH__DEV__ENABLED", "false")
    monkeypatch.setenv("AML_MCP_AUTH__ISSUERS", json.dumps([{"issuer": "https://id.example"}]))
    settings = Settings(data_dir=tmp_path)
    assert settings.auth.enabled and not settings.auth.dev.enabled
    assert settings.auth.tenant_claim == "https://aml.example/bank"
    assert settings.auth.issuers[0].issuer == "https://id.example"


def test_serve_refuses_exposure(tmp_path: Path) -> None:
    def refusal(**auth: Any) -> str | None:
        return serve_refusal(Settings(host="0.0.0.0", data_dir=tmp_path, auth=AuthSettings(**auth)))  # noqa: S104

    assert "authentication is off" in (refusal(enabled=False) or "")
    assert "development authorization server" in (refusal() or "")
    assert refusal(dev={"enabled": False}, issuers=[{"issuer": "https://id.example"}]) is None
    assert serve_refusal(Settings(data_dir=tmp_path, auth=AuthSettings(enabled=False))) is None


def test_audit_log_never_raises_and_writes_json_lines(tmp_path: Path) -> None:
    class Broken:
        def write_batch(self, events: Sequence[AuditEvent]) -> None:
            raise OSError("disk full")

    sink = JsonLinesSink(tmp_path / "audit.jsonl")
    log = AuditLog([Broken(), sink])
    principal = Principal("iss", "alice", "bank-a", "cli", token_id="j1")
    log.record(
        AuditEvent.about(principal, decision=Decision.ALLOW, reason="ok", method="tools/call", target="t")
    )
    log.record(AuditEvent(decision=Decision.DENY, reason="no_token", method="tools/list"))
    log.close()
    lines = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [line["reason"] for line in lines] == ["ok", "no_token"]
    assert lines[0]["subject"] == "alice" and lines[0]["token_id"] == "j1" and lines[1]["subject"] is None
    assert set(lines[0]) == {
        "time", "issuer", "subject", "tenant", "client_id", "token_id", "method", "target", "decision",
        "reason", "detail",
    }  # fmt: skip


def test_access_log_lines_never_carry_a_query_string_token() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/mcp?a=1&Access_Token=eyJ.secret.sig", "1.1", 400), None,
    )  # fmt: skip
    assert CredentialRedactingFilter().filter(record)
    assert (
        "eyJ" not in record.getMessage() and "access_token=[redacted]".lower() in record.getMessage().lower()
    )
