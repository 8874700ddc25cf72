"""Bounded `/oauth/*` request bodies, dynamic registration field limits and quota, over real HTTP.

Every refusal is an OAuth-style JSON error (413, 400, 429 with `Retry-After`, 403), never a 5xx,
and nothing of a refused registration is stored.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.dev_issuer import REDIRECT, authorize_url, dev_issuer_server
from tests.support.oauth import SecuredServer

MIB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path_factory.mktemp("limits")) as running:
        yield running


def registered_clients(data_dir: Path) -> int:
    conn = sqlite3.connect(f"file:{data_dir / 'devauth.db'}?mode=ro", uri=True)
    try:
        return int(conn.execute("SELECT COUNT(*) FROM clients WHERE registered = 1").fetchone()[0])
    finally:
        conn.close()


def assert_too_large(answer: httpx.Response) -> None:
    assert answer.status_code == 413, answer.text[:200]
    assert answer.json()["error"] == "invalid_request"
    assert "65536 bytes" in answer.json()["error_description"]


def _chunks(total: int) -> Iterator[bytes]:
    sent = 0
    while sent < total:
        yield b"a" * 65_536
        sent += 65_536


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_large_registration_is_refused_and_not_stored(server: SecuredServer, chunked: bool) -> None:
    before = registered_clients(server.data_dir)
    body = json.dumps({"redirect_uris": [REDIRECT], "client_name": "x" * (4 * MIB)}).encode()
    content = (chunk for chunk in [body[i : i + MIB] for i in range(0, len(body), MIB)]) if chunked else body
    with httpx.Client(timeout=60) as http:
        answer = http.post(
            f"{server.url}/oauth/register", content=content, headers={"content-type": "application/json"}
        )
    assert_too_large(answer)
    assert registered_clients(server.data_dir) == before


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_large_token_form_is_refused(server: SecuredServer, chunked: bool) -> None:
    form = b"grant_type=authorization_code&code=" + b"a" * (4 * MIB)
    content = _chunks(4 * MIB) if chunked else form
    with httpx.Client(timeout=60) as http:
        answer = http.post(
            f"{server.url}/oauth/token",
            content=content,
            headers={"content-type": "application/x-www-form-urlencoded"},
        )
    assert_too_large(answer)


def test_a_large_consent_form_is_refused(server: SecuredServer) -> None:
    with httpx.Client(timeout=60) as http:
        answer = http.post(authorize_url(server), data={"decision": "approve", "padding": "p" * (2 * MIB)})
    assert_too_large(answer)


def test_a_form_just_under_the_limit_is_still_read(server: SecuredServer) -> None:
    with httpx.Client(timeout=60) as http:
        answer = http.post(
            f"{server.url}/oauth/token",
            data={"grant_type": "authorization_code", "code": "c" * 60_000, "client_id": "aml-mcp-cli"},
        )
    assert answer.status_code == 400 and answer.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("metadata", "mentions"),
    [
        ({"redirect_uris": [REDIRECT], "client_name": "n" * 201}, "client_name"),
        ({"redirect_uris": [REDIRECT], "client_name": ["not", "a", "string"]}, "client_name"),
        ({"redirect_uris": [f"http://127.0.0.1:{port}/cb" for port in range(1, 12)]}, "redirect_uris"),
        ({"redirect_uris": ["https://app.example/" + "p" * 2_000]}, "redirect_uris"),
    ],
    ids=["long-name", "name-not-string", "too-many-uris", "long-uri"],
)
def test_registration_fields_are_bounded(
    server: SecuredServer, metadata: dict[str, object], mentions: str
) -> None:
    before = registered_clients(server.data_dir)
    answer = server.http.post(f"{server.url}/oauth/register", json=metadata)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == "invalid_client_metadata"
    assert mentions in answer.json()["error_description"]
    assert registered_clients(server.data_dir) == before


def test_registration_within_the_limits_still_works(server: SecuredServer) -> None:
    answer = server.http.post(
        f"{server.url}/oauth/register",
        json={
            "redirect_uris": [f"http://127.0.0.1:{port}/cb" for port in range(1, 11)],
            "client_name": "n" * 200,
        },
    )
    assert answer.status_code == 201, answer.text


def test_registrations_per_minute_are_limited(tmp_path: Path) -> None:
    with dev_issuer_server(tmp_path, max_registrations_per_minute=5) as server:
        answers = [
            server.http.post(f"{server.url}/oauth/register", json={"redirect_uris": [REDIRECT]})
            for _ in range(8)
        ]
        assert [answer.status_code for answer in answers] == [201] * 5 + [429] * 3
        limited = answers[-1]
        assert limited.json()["error"] == "temporarily_unavailable"
        assert 1 <= int(limited.headers["retry-after"]) <= 60
        assert registered_clients(server.data_dir) == 5


def test_the_total_of_registered_clients_is_capped_under_concurrency(tmp_path: Path) -> None:
    """Sixteen registrations at once against room for three: exactly three are stored."""
    with dev_issuer_server(tmp_path, max_registered_clients=3, max_registrations_per_minute=100) as server:
        barrier = threading.Barrier(16)
        statuses: list[int] = []
        lock = threading.Lock()

        def register() -> None:
            with httpx.Client(timeout=30) as http:
                barrier.wait()
                answer = http.post(f"{server.url}/oauth/register", json={"redirect_uris": [REDIRECT]})
            with lock:
                statuses.append(answer.status_code)
                if answer.status_code == 403:
                    assert answer.json()["error"] == "access_denied"

        threads = [threading.Thread(target=register) for _ in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert sorted(statuses) == [201] * 3 + [403] * 13
        assert registered_clients(server.data_dir) == 3
