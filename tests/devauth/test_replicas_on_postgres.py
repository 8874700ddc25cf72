"""Two replicas of the development authorization server on one PostgreSQL database act as one.

Each replica is the whole app on a real socket of its own, with a data directory of its own and
the public URL of the load balancer that would sit in front of both (so the same issuer and
audience): the only thing they share is the database. A client registered on A logs in through a
page served by A and posted to B, redeems its code on B, calls A with the token B issued; a refresh
token rotated on A and replayed on B revokes the whole grant, access tokens included, on both
replicas at once (their revocation lists are re-read on the database's notification: the periodic
re-read is set far beyond the one second the tests allow); password attempts are counted for
both. `aml-mcp token` and `aml-mcp devauth` with `--database-url` act for every replica.
"""

from __future__ import annotations

import base64
import json
import shlex
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.cli.serve_run import serve_banner
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.wiring import SERVICE_CLIENT_ID
from tests.support.dev_issuer import REDIRECT, pkce, probe_catalog
from tests.support.oauth import SecuredServer, auth_settings, consent_form, secured_server
from tests.support.postgres import scratch_schema
from tests.support.waiting import eventually

PUBLIC_URL = "http://127.0.0.1:9/mcp"
"""The load balancer's URL both replicas are configured with (nothing listens there)."""
ISSUER = "http://127.0.0.1:9/oauth"
PROBE = {"name": "probe_read", "arguments": {}}


@dataclass
class Pair:
    a: SecuredServer
    b: SecuredServer
    url: str
    schema: str


REVOCATION_POLL_SECONDS = 30.0
"""Each replica's periodic re-read of the revocation list: far beyond what the tests wait, so a
revocation reaches the other replica by the database's notification or not at all."""


def _replica(data_dir: Path, url: str, schema: str) -> Any:
    auth = auth_settings(dev=True, revocation_refresh_seconds=REVOCATION_POLL_SECONDS).model_copy(
        update={"dev": DevAuthSettings(enabled=True)}
    )
    return secured_server(
        data_dir,
        probe_catalog(),
        auth=auth,
        real_socket=True,
        public_url=PUBLIC_URL,
        database_url=url,
        database_schema=schema,
    )


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    with (
        scratch_schema() as (url, schema),
        _replica(tmp_path_factory.mktemp("replica-a"), url, schema) as a,
        _replica(tmp_path_factory.mktemp("replica-b"), url, schema) as b,
    ):
        yield Pair(a, b, url, schema)


def _claims(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


def _register(server: SecuredServer) -> str:
    answer = server.http.post(
        "/oauth/register",
        json={
            "redirect_uris": [REDIRECT],
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "client_name": "replicated app",
        },
    )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["client_id"])


def _authorize_query(client_id: str, challenge: str) -> str:
    return urlencode(
        {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "state": "st-1",
            "scope": "aml:read",
            "code_challenge": challenge,
            "code_challenge_method": "S256",
        }
    )


def _code_across(page_from: SecuredServer, post_to: SecuredServer, client_id: str) -> tuple[str, str]:
    """(code, verifier): the login page served by one replica, the consent posted to the other."""
    verifier, challenge = pkce()
    query = _authorize_query(client_id, challenge)
    page = page_from.http.get(f"/oauth/authorize?{query}")
    assert page.status_code == 200, page.text
    answer = post_to.http.post(
        f"/oauth/authorize?{query}", data=consent_form(page.text, "alice", None, "approve")
    )
    assert answer.status_code == 302, answer.text
    params = {key: values[0] for key, values in parse_qs(urlsplit(answer.headers["location"]).query).items()}
    assert params["iss"] == ISSUER
    return params["code"], verifier


def _redeem(server: SecuredServer, client_id: str, code: str, verifier: str) -> httpx.Response:
    return server.http.post(
        "/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )


def _refresh(server: SecuredServer, client_id: str, refresh_token: str) -> httpx.Response:
    return server.http.post(
        "/oauth/token",
        data={"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id},
    )


def _jwks(server: SecuredServer) -> dict[str, Any]:
    answer = server.http.get("/oauth/jwks.json")
    assert answer.status_code == 200
    return dict(answer.json())


def test_a_code_from_a_is_redeemed_on_b_and_bs_token_is_accepted_by_a(pair: Pair) -> None:
    client_id = _register(pair.a)
    code, verifier = _code_across(pair.a, pair.b, client_id)
    granted = _redeem(pair.b, client_id, code, verifier)
    assert granted.status_code == 200, granted.text
    token = granted.json()["access_token"]
    claims = _claims(token)
    assert (claims["iss"], claims["aud"], claims["sub"]) == (ISSUER, PUBLIC_URL, "alice")
    for server in (pair.a, pair.b):
        call = server.post("tools/call", PROBE, token=token)
        assert call.status_code == 200, call.text
        assert call.json()["result"]["content"][0]["text"] == "alice"
    # Redeemed once, on either replica: A refuses the same code now.
    again = _redeem(pair.a, client_id, code, verifier)
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


def test_both_replicas_publish_the_same_jwks(pair: Pair) -> None:
    assert _jwks(pair.a) == _jwks(pair.b)
    assert len(_jwks(pair.a)["keys"]) >= 1


def test_a_refresh_token_rotated_on_a_and_replayed_on_b_revokes_the_family(pair: Pair) -> None:
    client_id = _register(pair.b)
    code, verifier = _code_across(pair.b, pair.a, client_id)
    first = _redeem(pair.a, client_id, code, verifier).json()
    rotated = _refresh(pair.a, client_id, first["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    successor = rotated.json()["refresh_token"]
    assert pair.b.post("tools/call", PROBE, token=rotated.json()["access_token"]).status_code == 200
    replayed = _refresh(pair.b, client_id, first["refresh_token"])
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
    # The replay revoked the grant: the successor the legitimate client holds is dead on both.
    for server in (pair.a, pair.b):
        after = _refresh(server, client_id, successor)
        assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


def _refused_on_both_within_a_second(pair: Pair, token: str) -> None:
    for server in (pair.a, pair.b):

        def refused(server: SecuredServer = server) -> bool:
            return server.post("tools/call", PROBE, token=token).status_code == 401

        eventually(refused, timeout=1.0, what=f"the access token to be refused on {server.url}")


def test_a_code_replayed_on_b_revokes_the_access_token_on_both_replicas_at_once(pair: Pair) -> None:
    client_id = _register(pair.a)
    code, verifier = _code_across(pair.a, pair.a, client_id)
    granted = _redeem(pair.a, client_id, code, verifier)
    assert granted.status_code == 200, granted.text
    access = granted.json()["access_token"]
    for server in (pair.a, pair.b):
        assert server.post("tools/call", PROBE, token=access).status_code == 200
    replayed = _redeem(pair.b, client_id, code, verifier)
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"
    _refused_on_both_within_a_second(pair, access)


def test_a_refresh_token_reused_on_b_revokes_every_access_token_of_the_family_on_both(pair: Pair) -> None:
    client_id = _register(pair.b)
    code, verifier = _code_across(pair.b, pair.a, client_id)
    first = _redeem(pair.a, client_id, code, verifier).json()
    rotated = _refresh(pair.a, client_id, first["refresh_token"])
    assert rotated.status_code == 200, rotated.text
    second = rotated.json()["access_token"]
    assert pair.b.post("tools/call", PROBE, token=second).status_code == 200
    assert _refresh(pair.b, client_id, first["refresh_token"]).status_code == 400
    for token in (first["access_token"], second):
        _refused_on_both_within_a_second(pair, token)


def test_the_review_race_one_code_redeemed_by_many_at_once_leaves_no_usable_token(pair: Pair) -> None:
    """The review's probe: 16 redemptions of one code raced over both replicas. One wins, the
    others are replays: whether they land before or after the winner mints its token, that token
    is refused on both replicas within a second."""
    client_id = _register(pair.a)
    code, verifier = _code_across(pair.a, pair.b, client_id)
    barrier = threading.Barrier(16)
    answers: list[httpx.Response] = []

    def redeem(server: SecuredServer) -> None:
        with httpx.Client(base_url=server.url, timeout=15) as http:
            barrier.wait()
            answer = http.post(
                "/oauth/token",
                data={
                    "grant_type": "authorization_code",
                    "code": code,
                    "redirect_uri": REDIRECT,
                    "client_id": client_id,
                    "code_verifier": verifier,
                },
            )
        answers.append(answer)

    threads = [threading.Thread(target=redeem, args=((pair.a, pair.b)[n % 2],)) for n in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    won = [answer for answer in answers if answer.status_code == 200]
    assert len(won) == 1, [answer.status_code for answer in answers]
    assert sorted({answer.status_code for answer in answers}) == [200, 400]
    _refused_on_both_within_a_second(pair, won[0].json()["access_token"])


def test_password_attempts_are_counted_across_replicas(pair: Pair) -> None:
    _, challenge = pkce()
    query = _authorize_query("aml-mcp-cli", challenge)
    page = pair.a.http.get(f"/oauth/authorize?{query}")
    assert page.status_code == 200
    servers = (pair.a, pair.b)
    statuses = [
        servers[n % 2]
        .http.post(f"/oauth/authorize?{query}", data=consent_form(page.text, "erin", f"wrong{n}", "approve"))
        .status_code
        for n in range(6)
    ]
    assert statuses == [401] * 5 + [429], statuses
    right = pair.a.http.post(
        f"/oauth/authorize?{query}", data=consent_form(page.text, "erin", None, "approve")
    )
    assert right.status_code == 429 and int(right.headers["retry-after"]) >= 1


def test_the_token_command_with_the_database_mints_a_token_every_replica_accepts(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AML_MCP_DATABASE_SCHEMA", pair.schema)
    args = ["token", "--data-dir", str(tmp_path / "elsewhere"), "--database-url", pair.url]
    args += ["--public-url", PUBLIC_URL, "--subject", "dave", "--tenant", "harbour-trust"]
    assert cli_main(args) == 0
    token = capsys.readouterr().out.strip()
    assert _claims(token)["iss"] == ISSUER
    for server in (pair.a, pair.b):
        assert server.post("tools/call", PROBE, token=token).status_code == 200
    # The same command without the database signs with a key of that data directory: refused.
    assert cli_main(args[:3] + args[5:]) == 0
    local = capsys.readouterr().out.strip()
    assert pair.a.post("tools/call", PROBE, token=local).status_code == 401


def test_the_service_client_secret_is_one_for_every_replica(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AML_MCP_DATABASE_SCHEMA", pair.schema)
    command = ["devauth", "client-secret", "--data-dir", str(tmp_path), "--database-url", pair.url]
    assert cli_main(command) == 0
    secret = capsys.readouterr().out.strip()
    for server in (pair.a, pair.b):
        granted = server.http.post(
            "/oauth/token",
            data={"grant_type": "client_credentials", "scope": "aml:read", "resource": PUBLIC_URL},
            auth=(SERVICE_CLIENT_ID, secret),
        )
        assert granted.status_code == 200, granted.text


def test_a_key_rotation_reaches_both_replicas_and_old_tokens_stay_valid(
    pair: Pair, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    old = pair.a.dev_token(subject="alice", tenant="meridian-bank").token
    before = {key["kid"] for key in _jwks(pair.a)["keys"]}
    monkeypatch.setenv("AML_MCP_DATABASE_SCHEMA", pair.schema)
    command = ["devauth", "rotate-keys", "--data-dir", str(tmp_path), "--database-url", pair.url]
    assert cli_main(command) == 0
    capsys.readouterr()
    assert _jwks(pair.a) == _jwks(pair.b)
    after = {key["kid"] for key in _jwks(pair.b)["keys"]}
    assert before < after
    new = pair.b.dev_token(subject="alice", tenant="meridian-bank").token
    for server in (pair.a, pair.b):
        assert server.post("tools/call", PROBE, token=old).status_code == 200
        assert server.post("tools/call", PROBE, token=new).status_code == 200


@pytest.mark.parametrize(
    "data",
    [
        {"grant_type": "authorization_code", "code": "x", "client_id": "nul\x00client", "code_verifier": "v"},
        {"grant_type": "authorization_code", "code": "nul\x00code", "client_id": "aml-mcp-cli"},
        {"grant_type": "refresh_token", "refresh_token": "nul\x00token", "client_id": "aml-mcp-cli"},
    ],
)
def test_values_postgres_text_cannot_hold_are_refused_with_a_4xx(pair: Pair, data: dict[str, str]) -> None:
    answer = pair.a.http.post("/oauth/token", data=data)
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.json()["error"] in {"invalid_client", "invalid_grant", "invalid_request"}


def test_a_nul_in_the_resource_of_an_authorization_is_refused_with_a_4xx(pair: Pair) -> None:
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": "aml-mcp-cli",
        "redirect_uri": REDIRECT,
        "scope": "aml:read",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": "http://127.0.0.1:9/mcp\x00",
    }
    page = pair.a.http.get(f"/oauth/authorize?{urlencode(query)}")
    assert page.status_code == 302, page.text
    refusal = parse_qs(urlsplit(page.headers["location"]).query)
    assert refusal["error"] == ["invalid_target"] and "code" not in refusal


def test_a_registration_holding_nul_is_refused_or_stored_never_a_500(pair: Pair) -> None:
    answer = pair.a.http.post(
        "/oauth/register",
        content=b'{"redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none",'
        b' "client_name": "nul\\u0000name \\ud800"}',
        headers={"content-type": "application/json"},
    )
    assert answer.status_code in {201, 400}, answer.text


def test_without_the_database_replicas_do_not_share_keys(tmp_path: Path) -> None:
    """The counterpart that shows the tests above can fail: separate data directories, separate keys."""
    auth = auth_settings(dev=True)
    with (
        secured_server(tmp_path / "a", probe_catalog(), auth=auth, public_url=PUBLIC_URL) as a,
        secured_server(tmp_path / "b", probe_catalog(), auth=auth, public_url=PUBLIC_URL) as b,
    ):
        assert _jwks(a) != _jwks(b)
        token = a.dev_token(subject="alice", tenant="meridian-bank").token
        assert b.post("tools/call", PROBE, token=token).status_code == 401


def test_the_serve_banners_token_command_uses_the_shared_keys(
    pair: Pair, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    line = next(line for line in serve_banner(pair.a.settings).splitlines() if " token --data-dir" in line)
    words = shlex.split(line)
    start = next(index for index, word in enumerate(words) if word == "token")
    for word in words[:start]:
        name, _, value = word.partition("=")
        if name.startswith("AML_MCP_"):
            monkeypatch.setenv(name, value)
    assert "--database-url" in words
    assert cli_main(words[start:]) == 0
    token = capsys.readouterr().out.strip()
    for server in (pair.a, pair.b):
        assert server.post("tools/call", PROBE, token=token).status_code == 200


def test_the_serve_banner_never_prints_a_database_password(pair: Pair) -> None:
    settings = pair.a.settings.model_copy(update={"database_url": "postgresql://aml:hunter2@db.example/aml"})
    banner = serve_banner(settings)
    assert "hunter2" not in banner
    assert '--database-url "$AML_MCP_DATABASE_URL"' in banner
