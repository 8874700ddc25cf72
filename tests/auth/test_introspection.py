"""Opaque access tokens verified by RFC 7662 introspection: the verifier on its own (answers checked,
cached no longer than the token lives, outages fail closed), then through the bearer gate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from aml_mcp.auth.errors import TokenRejected, VerifierUnavailable
from aml_mcp.auth.introspection import IntrospectionVerifier
from aml_mcp.auth.settings import IntrospectionSettings
from tests.auth.samples import RULES, claims
from tests.support.clocks import ManualClock
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server
from tests.support.scoped_catalog import scoped_catalog


def _introspection(
    answers: dict[str, dict[str, Any]], clock: ManualClock
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
    clock = ManualClock()
    active = {**claims(exp=clock.now + 20), "active": True}
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


# -- through the bearer gate, against the test issuer's introspection endpoint -------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    data_dir: Path = tmp_path_factory.mktemp("introspection")
    auth = auth_settings([issuer], introspection=issuer.introspection_settings)
    with secured_server(data_dir, scoped_catalog(), issuer=issuer, auth=auth) as running:
        yield running


def test_opaque_token_is_introspected_once_then_cached(server: SecuredServer, issuer: TestIssuer) -> None:
    token = issuer.opaque(audience=server.resource, subject="olga", tenant="bank-b", scope="aml:read")
    before = issuer.introspection_requests
    for _ in range(3):
        response = server.post("tools/call", {"name": "probe_read", "arguments": {}}, token=token)
        assert response.status_code == 200, response.text
        assert response.json()["result"]["structuredContent"]["subject"] == "olga"
    assert issuer.introspection_requests == before + 1
    assert server.post("tools/call", {"name": "probe_eval", "arguments": {}}, token=token).status_code == 403


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (lambda s, i: i.opaque(audience=s.resource, active=False), "inactive_token"),
        (lambda s, i: "never-issued-opaque-token", "inactive_token"),
        (lambda s, i: i.opaque(audience="https://weather.example/mcp"), "wrong_audience"),
        (lambda s, i: i.opaque(audience=s.resource, tenant=""), "missing_tenant"),
    ],
    ids=["inactive", "unknown", "other audience", "no tenant"],
)
def test_opaque_token_refusals(
    server: SecuredServer, issuer: TestIssuer, make: Callable[[SecuredServer, TestIssuer], str], reason: str
) -> None:
    mark = server.audit_mark()
    response = server.post("tools/list", token=make(server, issuer))
    assert response.status_code == 401
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    server.wait_for_audit(since=mark, decision="deny", reason=reason)
