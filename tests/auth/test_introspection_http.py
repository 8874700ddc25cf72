"""Opaque access tokens, verified by RFC 7662 introspection over real HTTP, through the bearer gate."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.auth.conftest import scoped_catalog
from tests.support.oauth import SecuredServer, TestIssuer, auth_settings, secured_server


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
