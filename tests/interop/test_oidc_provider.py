"""aml-mcp as the resource server of an authorization server it did not write: `oidc-provider`.

A real `aml-mcp serve` (a child process, the development authorization server off) trusts a real
oidc-provider (`tests/support/oidc_provider.py`, configuration `tests/interop/oidc/configuration.mjs`)
by settings alone: the issuer, the tenant at `org.bank`, `preferred_username` as the subject, and
the provider's introspection endpoint. Every token here was issued by the provider over HTTP; each
refusal is checked on the wire (401/403 and the challenge) and in the audit trail.

The server runs with `leeway_seconds = 0` (the expired token is refused the moment it expires),
`jwks_cache_seconds = 3` (a withdrawn key stops working within 3 s: the bound a bank tunes) and
`jwks_refetch_interval_seconds = 0`: this provider signs with a new key the moment it has one, and
the first token of it must cause a refetch whenever it comes (with the default 30 s, one that
comes within 30 s of the last fetch waits that long; providers that publish their next key before
signing with it are followed at the next fetch whatever the interval).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.support.mcp_http import WITH_TASKS, message, post
from tests.support.oauth import audit_events, audit_mark, wait_for_audit
from tests.support.oidc_provider import (
    HARBOUR_SERVICE_CLIENT,
    OPAQUE_CLIENT,
    OPAQUE_TTL_SECONDS,
    SCP_CLIENT,
    SHORT_LIVED_CLIENT,
    SHORT_TTL_SECONDS,
    OidcProvider,
    serve_trusting,
)
from tests.support.subprocess_server import ServerProcess
from tests.support.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(180)]

JWKS_CACHE_SECONDS = 3


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider() as running:
        yield running


@pytest.fixture(scope="module")
def stranger() -> Iterator[OidcProvider]:
    """Another oidc-provider, configured the same way, that aml-mcp does not trust."""
    with OidcProvider() as running:
        yield running


class Served:
    def __init__(self, server: ServerProcess, data_dir: Path) -> None:
        self.server = server
        self.data_dir = data_dir
        self.resource = f"{server.url}/mcp"
        self.http = httpx.Client(base_url=server.url, timeout=30)

    def call(self, tool: str, token: str, arguments: dict[str, Any] | None = None) -> httpx.Response:
        body = message("tools/call", {"name": tool, "arguments": arguments or {}}, capabilities=WITH_TASKS)
        return post(self.http, body, token=token)

    def search(self, token: str) -> httpx.Response:
        return self.call("search_aml_notes", token, {"query": "cash structuring", "top_k": 2})


@pytest.fixture(scope="module")
def served(provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("oidc-served")
    with serve_trusting(
        provider,
        data_dir,
        leeway_seconds=0,
        jwks_cache_seconds=JWKS_CACHE_SECONDS,
        jwks_refetch_interval_seconds=0,
    ) as server:
        running = Served(server, data_dir)
        with running.http:
            yield running


def _refused(answer: httpx.Response, status: int, error: str) -> None:
    assert answer.status_code == status, answer.text
    assert f'error="{error}"' in answer.headers["www-authenticate"], answer.headers
    assert "resource_metadata=" in answer.headers["www-authenticate"]


# -- discovery ------------------------------------------------------------------------------------------


def test_the_protected_resource_metadata_names_the_provider_alone(
    served: Served, provider: OidcProvider
) -> None:
    metadata = served.http.get("/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["resource"] == served.resource
    assert metadata["authorization_servers"] == [provider.issuer]
    assert provider.metadata()["issuer"] == provider.issuer  # what a client checks it against
    assert served.http.get("/.well-known/oauth-authorization-server/oauth").status_code == 404


# -- accepted -------------------------------------------------------------------------------------------


def test_a_provider_token_for_this_resource_is_accepted_and_audited(
    served: Served, provider: OidcProvider
) -> None:
    mark = audit_mark(served.data_dir)
    token = provider.client_credentials(served.resource).access_token
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == served.resource and claims["org"] == {"bank": "meridian-bank"}
    answer = served.search(token)
    assert answer.status_code == 200, answer.text
    assert "MRD-" in answer.text and "HBT-" not in answer.text  # meridian-bank's notes only
    event = wait_for_audit(served.data_dir, since=mark, reason="ok", method="tools/call")
    assert (event["issuer"], event["tenant"]) == (provider.issuer, "meridian-bank")
    assert (event["subject"], event["client_id"]) == ("aml-mcp-service", "aml-mcp-service")
    assert event["token_id"] == claims["jti"]


def test_the_bank_in_the_token_decides_whose_notes_are_searched(
    served: Served, provider: OidcProvider
) -> None:
    token = provider.client_credentials(served.resource, client=HARBOUR_SERVICE_CLIENT).access_token
    answer = served.search(token)
    assert answer.status_code == 200, answer.text
    assert "HBT-" in answer.text and "MRD-" not in answer.text


def test_scopes_in_an_scp_list_are_read_when_there_is_no_scope_claim(
    served: Served, provider: OidcProvider
) -> None:
    token = provider.client_credentials(served.resource, client=SCP_CLIENT, scope="aml:read").access_token
    claims = jwt.decode(token, options={"verify_signature": False})
    assert "scope" not in claims and claims["scp"] == ["aml:read"]
    assert served.search(token).status_code == 200
    _refused(served.call("run_full_eval", token), 403, "insufficient_scope")


# -- refused, each for its own reason ---------------------------------------------------------------------


def test_a_token_for_another_resource_is_refused(served: Served, provider: OidcProvider) -> None:
    mark = audit_mark(served.data_dir)
    token = provider.client_credentials("http://127.0.0.1:9/other/mcp").access_token
    assert jwt.decode(token, options={"verify_signature": False})["aud"] == "http://127.0.0.1:9/other/mcp"
    _refused(served.search(token), 401, "invalid_token")
    event = wait_for_audit(served.data_dir, since=mark, reason="wrong_audience")
    assert event["decision"] == "deny" and event["subject"] is None
    assert event["detail"]["unverified"]["iss"] == provider.issuer


def test_a_token_from_another_issuer_is_refused(served: Served, stranger: OidcProvider) -> None:
    mark = audit_mark(served.data_dir)
    token = stranger.client_credentials(served.resource).access_token  # right audience, wrong issuer
    _refused(served.search(token), 401, "invalid_token")
    event = wait_for_audit(served.data_dir, since=mark, reason="wrong_issuer")
    assert event["detail"]["unverified"]["iss"] == stranger.issuer


def test_an_expired_token_is_refused_even_after_it_was_accepted(
    served: Served, provider: OidcProvider
) -> None:
    token = provider.client_credentials(served.resource, client=SHORT_LIVED_CLIENT)
    assert token.expires_in == SHORT_TTL_SECONDS
    assert served.search(token.access_token).status_code == 200  # now it is remembered as verified
    exp = jwt.decode(token.access_token, options={"verify_signature": False})["exp"]
    time.sleep(max(0.0, exp - time.time()) + 0.2)
    mark = audit_mark(served.data_dir)
    _refused(served.search(token.access_token), 401, "invalid_token")
    wait_for_audit(served.data_dir, since=mark, reason="expired")


def test_a_token_without_the_tools_scope_is_refused_with_the_scope_to_ask_for(
    served: Served, provider: OidcProvider
) -> None:
    mark = audit_mark(served.data_dir)
    token = provider.client_credentials(served.resource, scope="aml:read").access_token
    answer = served.call("run_full_eval", token)
    _refused(answer, 403, "insufficient_scope")
    assert 'scope="aml:eval"' in answer.headers["www-authenticate"]
    event = wait_for_audit(served.data_dir, since=mark, reason="insufficient_scope")
    assert (event["subject"], event["tenant"]) == ("aml-mcp-service", "meridian-bank")
    assert event["detail"]["needed"] == ["aml:eval"] and event["detail"]["granted"] == ["aml:read"]


def test_a_user_whose_directory_entry_names_two_banks_is_refused_not_guessed(
    served: Served, provider: OidcProvider
) -> None:
    """mallory's entry lists two banks (`org.bank` = a list of two): the provider signs that, and
    aml-mcp refuses it as `malformed_claim` (401), never picks one, and never answers 500."""
    token = provider.authorization_code_token(served.resource, "mallory", scope="aml:read")
    assert jwt.decode(token, options={"verify_signature": False})["org"]["bank"] == [
        "meridian-bank",
        "harbour-trust",
    ]
    mark = audit_mark(served.data_dir)
    answer = served.search(token)
    _refused(answer, 401, "invalid_token")
    assert "exactly one tenant" in answer.headers["www-authenticate"]
    wait_for_audit(served.data_dir, since=mark, reason="malformed_claim")
    bob = provider.authorization_code_token(served.resource, "bob", scope="aml:read")  # ["harbour-trust"]
    assert served.search(bob).status_code == 200


# -- key rotation -----------------------------------------------------------------------------------------


def test_the_provider_rotates_its_key_and_aml_mcp_follows_without_a_restart(
    served: Served, provider: OidcProvider
) -> None:
    pid = served.server.proc.pid if served.server.proc else None
    old = provider.client_credentials(served.resource).access_token
    old_kid = jwt.get_unverified_header(old)["kid"]
    assert served.search(old).status_code == 200

    kids = provider.rotate_keys()  # a new signing key, first; the old one still published
    assert kids[1:] == [old_kid] or old_kid in kids[1:]
    new = provider.client_credentials(served.resource).access_token
    new_kid = jwt.get_unverified_header(new)["kid"]
    assert new_kid == kids[0] != old_kid
    assert served.search(new).status_code == 200, "a token of the new key must be accepted at once"
    assert served.search(old).status_code == 200, "the old key is still published"

    assert provider.retire_keys() == [new_kid]  # the old key leaves the JWKS
    mark = audit_mark(served.data_dir)
    # Within the key cache's lifetime the old key is still believed; after it, refused.
    refused = eventually(
        lambda: served.search(old),
        until=lambda answer: answer.status_code == 401,
        timeout=JWKS_CACHE_SECONDS + 5,
        interval=0.25,
        what="the token of the withdrawn key to be refused",
    )
    _refused(refused, 401, "invalid_token")
    wait_for_audit(served.data_dir, since=mark, reason="unknown_key")
    assert served.search(new).status_code == 200
    assert (
        served.server.proc is not None and served.server.proc.pid == pid and served.server.proc.poll() is None
    )


# -- opaque tokens ----------------------------------------------------------------------------------------


def test_opaque_tokens_are_introspected_at_the_provider_and_cached_no_longer_than_they_live(
    served: Served, provider: OidcProvider
) -> None:
    token = provider.client_credentials(served.resource, client=OPAQUE_CLIENT)
    assert token.access_token.count(".") == 0 and token.expires_in == OPAQUE_TTL_SECONDS
    before = provider.requests("POST /token/introspection")
    mark = audit_mark(served.data_dir)
    for _ in range(3):
        answer = served.search(token.access_token)
        assert answer.status_code == 200, answer.text
    assert provider.requests("POST /token/introspection") == before + 1  # one answer, reused
    event = wait_for_audit(served.data_dir, since=mark, reason="ok")
    assert (event["subject"], event["tenant"], event["issuer"]) == (
        "opaque-service",
        "meridian-bank",
        provider.issuer,
    )
    # The cache would keep an answer for 60 s (`cache_seconds`); the token's own exp ends it sooner.
    time.sleep(OPAQUE_TTL_SECONDS + 0.5)
    mark = audit_mark(served.data_dir)
    _refused(served.search(token.access_token), 401, "invalid_token")
    assert provider.requests("POST /token/introspection") == before + 2  # asked again, once
    wait_for_audit(served.data_dir, since=mark, reason="inactive_token")


def test_no_token_reaches_the_audit_trail_or_the_log(served: Served, provider: OidcProvider) -> None:
    token = provider.client_credentials(served.resource).access_token
    assert served.search(token).status_code == 200
    eventually(lambda: audit_events(served.data_dir), what="audit events")
    trail = (served.data_dir / "audit.jsonl").read_text()
    signature = token.rsplit(".", 1)[1]
    assert signature not in trail and token.split(".")[1] not in trail
