"""The dynamic client registration answer has the RFC 7591 §3.2.1 shape, over real HTTP.

Strict clients (the TypeScript SDK, the Inspector) validate it against a schema where every member
is a string or a number when present: a `null` anywhere fails their login. A public client gets no
secret and so no `client_secret_expires_at`; a confidential one gets both.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.dev_issuer import REDIRECT, dev_issuer_server
from tests.support.oauth import SecuredServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path_factory.mktemp("registration")) as running:
        yield running


def _register(server: SecuredServer, **metadata: Any) -> dict[str, Any]:
    answer = server.http.post(f"{server.url}/oauth/register", json={"redirect_uris": [REDIRECT], **metadata})
    assert answer.status_code == 201, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    body = answer.json()
    assert isinstance(body, dict)
    return body


def _nulls(document: dict[str, Any]) -> list[str]:
    return [name for name, value in document.items() if value is None]


def test_a_public_client_gets_no_secret_and_no_null_member(server: SecuredServer) -> None:
    info = _register(server, token_endpoint_auth_method="none", client_name="public")
    assert _nulls(info) == []
    assert "client_secret" not in info and "client_secret_expires_at" not in info
    assert info["token_endpoint_auth_method"] == "none"
    assert isinstance(info["client_id"], str) and info["client_id"]
    assert isinstance(info["client_id_issued_at"], int)
    assert info["redirect_uris"] == [REDIRECT] and info["client_name"] == "public"


def test_a_public_client_without_a_name_has_no_name_member(server: SecuredServer) -> None:
    info = _register(server, token_endpoint_auth_method="none")
    assert _nulls(info) == [] and "client_name" not in info


def test_a_confidential_client_gets_its_secret_and_its_expiry(server: SecuredServer) -> None:
    info = _register(server, token_endpoint_auth_method="client_secret_post", client_name="confidential")
    assert _nulls(info) == []
    assert isinstance(info["client_secret"], str) and len(info["client_secret"]) >= 32
    assert info["client_secret_expires_at"] == 0  # RFC 7591: 0 = does not expire
    assert info["token_endpoint_auth_method"] == "client_secret_post"


def test_the_default_method_is_a_confidential_client(server: SecuredServer) -> None:
    info = _register(server)
    assert _nulls(info) == []
    assert info["token_endpoint_auth_method"] == "client_secret_basic" and info["client_secret"]
