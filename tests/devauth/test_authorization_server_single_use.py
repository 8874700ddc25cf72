"""Codes and refresh tokens are single-use under concurrency, and a replay revokes the grant family.

Sixteen requests are released together (a barrier, one connection each) against the real server;
exactly one may succeed. Every other one is a replay of a used credential, so afterwards nothing
descended from that authorization works any more (RFC 6749 §4.1.2, RFC 9700 §4.14.2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from tests.support.dev_issuer import approved_code, dev_issuer_server, redeem_code, refresh
from tests.support.oauth import SecuredServer

RACERS = 16


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path_factory.mktemp("single-use")) as running:
        yield running


@pytest.fixture(scope="module")
def racers(server: SecuredServer) -> Iterator[list[httpx.Client]]:
    """One client (one keep-alive connection) per racer, connected before any race starts."""
    clients = [httpx.Client(timeout=30) for _ in range(RACERS)]
    try:
        for client in clients:
            client.get(f"{server.url}/oauth/jwks.json").raise_for_status()
        yield clients
    finally:
        for client in clients:
            client.close()


def _race(
    clients: list[httpx.Client], send: Callable[[httpx.Client], httpx.Response]
) -> list[httpx.Response]:
    """`RACERS` requests sent at the same moment, each on its own open connection."""
    barrier = threading.Barrier(RACERS)
    answers: list[httpx.Response | BaseException] = [RuntimeError("not run")] * RACERS

    def run(index: int) -> None:
        try:
            barrier.wait()
            answers[index] = send(clients[index])
        except BaseException as error:  # reported by the assertion below
            answers[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(RACERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    failures = [answer for answer in answers if not isinstance(answer, httpx.Response)]
    assert not failures, failures
    return [answer for answer in answers if isinstance(answer, httpx.Response)]


def _winner(answers: list[httpx.Response]) -> httpx.Response:
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses == [200] + [400] * (RACERS - 1), statuses
    assert all(a.json()["error"] == "invalid_grant" for a in answers if a.status_code == 400)
    return next(answer for answer in answers if answer.status_code == 200)


@pytest.mark.parametrize("trial", range(3))
def test_sixteen_concurrent_redemptions_of_one_code_succeed_once(
    server: SecuredServer, racers: list[httpx.Client], trial: int
) -> None:
    code, verifier = approved_code(server)
    winner = _winner(_race(racers, lambda http: redeem_code(http, server, code, verifier)))
    # The other fifteen were replays of a used code: the refresh token the winner got is revoked too.
    with httpx.Client(timeout=30) as http:
        after = refresh(http, server, winner.json()["refresh_token"])
    assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


@pytest.mark.parametrize("trial", range(3))
def test_sixteen_concurrent_refreshes_of_one_token_succeed_once(
    server: SecuredServer, racers: list[httpx.Client], trial: int
) -> None:
    code, verifier = approved_code(server)
    with httpx.Client(timeout=30) as http:
        first = redeem_code(http, server, code, verifier).json()
    winner = _winner(_race(racers, lambda http: refresh(http, server, first["refresh_token"])))
    # No fork: the one new refresh token is dead as well, because the old one was reused.
    with httpx.Client(timeout=30) as http:
        after = refresh(http, server, winner.json()["refresh_token"])
    assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


def test_reusing_a_rotated_refresh_token_revokes_the_newest_one(server: SecuredServer) -> None:
    code, verifier = approved_code(server)
    with httpx.Client(timeout=30) as http:
        first = redeem_code(http, server, code, verifier).json()
        second = refresh(http, server, first["refresh_token"])
        assert second.status_code == 200
        third = refresh(http, server, second.json()["refresh_token"])
        assert third.status_code == 200
        # A thief replays the first token: refused, and the legitimate client's newest token with it.
        replay = refresh(http, server, first["refresh_token"])
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        newest = refresh(http, server, third.json()["refresh_token"])
        assert newest.status_code == 400 and newest.json()["error"] == "invalid_grant"


def test_replaying_a_code_revokes_the_refresh_token_issued_from_it(server: SecuredServer) -> None:
    code, verifier = approved_code(server)
    with httpx.Client(timeout=30) as http:
        issued = redeem_code(http, server, code, verifier)
        assert issued.status_code == 200
        replay = redeem_code(http, server, code, verifier)
        assert replay.status_code == 400 and replay.json()["error"] == "invalid_grant"
        after = refresh(http, server, issued.json()["refresh_token"])
        assert after.status_code == 400 and after.json()["error"] == "invalid_grant"


def test_other_families_are_untouched_by_a_replay(server: SecuredServer) -> None:
    code_a, verifier_a = approved_code(server)
    code_b, verifier_b = approved_code(server)
    with httpx.Client(timeout=30) as http:
        a = redeem_code(http, server, code_a, verifier_a).json()
        b = redeem_code(http, server, code_b, verifier_b).json()
        assert refresh(http, server, a["refresh_token"]).status_code == 200
        assert refresh(http, server, a["refresh_token"]).status_code == 400  # family A revoked
        assert refresh(http, server, b["refresh_token"]).status_code == 200  # family B still fine


def test_a_refused_refresh_request_does_not_use_the_token_up(server: SecuredServer) -> None:
    """Checks come before the token is rotated out: a request asking for more scope is refused,
    and the token still works for a correct request afterwards."""
    code, verifier = approved_code(server)
    with httpx.Client(timeout=30) as http:
        token = redeem_code(http, server, code, verifier).json()["refresh_token"]
        wider = refresh(http, server, token, scope="aml:read aml:admin")
        assert wider.status_code == 400 and wider.json()["error"] == "invalid_scope"
        other_resource = refresh(http, server, token, resource="https://weather.example/mcp")
        assert other_resource.status_code == 400 and other_resource.json()["error"] == "invalid_target"
        assert refresh(http, server, token).status_code == 200


def test_no_credential_is_stored_in_the_clear(server: SecuredServer) -> None:
    code, verifier = approved_code(server)
    with httpx.Client(timeout=30) as http:
        token = redeem_code(http, server, code, verifier).json()["refresh_token"]
    stored = b"".join(path.read_bytes() for path in server.data_dir.glob("devauth.db*"))
    assert code.encode() not in stored and token.encode() not in stored
