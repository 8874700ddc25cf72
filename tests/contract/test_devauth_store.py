"""Every `DevAuthStore` behaviour, on the SQLite file and on PostgreSQL.

`place.open_store()` opens a new store over the one shared place, as another process (a replica
behind the load balancer, or `aml-mcp devauth …`) would: two of them stand for two processes.
On PostgreSQL each store has connections of its own, so the races below run across connections.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from aml_mcp.devauth.postgres_store import DevAuthDatabase, PostgresDevStore, UnstorableValue
from aml_mcp.devauth.sqlite_store import DevStore
from aml_mcp.devauth.store import (
    DevAuthStore,
    DevClient,
    Grant,
    RegistrationRefused,
    StoredCode,
    digest,
    new_family,
)
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema

RACERS = 8


@dataclass
class Place:
    name: str
    open_store: Callable[[], DevAuthStore]
    """A new store over the shared place (closed by the fixture)."""
    expire_all: Callable[[], None]
    """Every stored code and refresh token expires now (written past the store)."""


@pytest.fixture(params=["sqlite", "postgres"])
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Place]:
    opened: list[DevAuthStore] = []

    def keep(store: DevAuthStore) -> DevAuthStore:
        opened.append(store)
        return store

    try:
        if request.param == "sqlite":
            path = tmp_path / "devauth.db"

            def expire_sqlite() -> None:
                conn = sqlite3.connect(path)
                with conn:
                    conn.execute("UPDATE codes SET expires_at = 0")
                    conn.execute("UPDATE refresh_tokens SET expires_at = 0")
                conn.close()

            yield Place("sqlite", lambda: keep(DevStore(path)), expire_sqlite)
            return
        with scratch_schema() as (url, schema):
            shared = PostgresDatabase(url, schema=schema)

            def expire_postgres() -> None:
                with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
                    conn.execute("UPDATE devauth_codes SET expires_at = 0")
                    conn.execute("UPDATE devauth_refresh_tokens SET expires_at = 0")

            yield Place(
                "postgres", lambda: keep(PostgresDevStore(DevAuthDatabase(shared).open())), expire_postgres
            )
            for store in opened:
                store.close()
            opened.clear()
    finally:
        for store in opened:
            store.close()


def _client(client_id: str = "client-1", **overrides: object) -> DevClient:
    values: dict[str, object] = {
        "client_id": client_id,
        "redirect_uris": ("https://app.example/cb",),
        "client_name": "An app",
        **overrides,
    }
    return DevClient(**values)  # type: ignore[arg-type]


def _code(family: str | None = None, client_id: str = "client-1", **overrides: str) -> StoredCode:
    values = {
        "client_id": client_id,
        "scope": "aml:read",
        "subject": "alice",
        "tenant": "bank-a",
        "resource": "http://127.0.0.1:8000/mcp",
        "family": family or new_family(),
        "redirect_uri": "https://app.example/cb",
        "code_challenge": "c" * 43,
        "code_challenge_method": "S256",
        **overrides,
    }
    return StoredCode(**values)


def _grant(family: str) -> Grant:
    return Grant("client-1", "aml:read", "alice", "bank-a", "http://127.0.0.1:8000/mcp", family)


# --- clients ---------------------------------------------------------------------------------------


def test_a_client_stored_by_one_process_is_read_by_another(place: Place) -> None:
    place.open_store().put_client(_client(secret_sha256=digest("s3cret"), tenant="bank-a"))
    found = place.open_store().client("client-1")
    assert found is not None
    assert found.redirect_uris == ("https://app.example/cb",)
    assert found.client_name == "An app" and found.tenant == "bank-a"
    assert found.check_client_secret("s3cret") and not found.check_client_secret("other")
    assert place.open_store().client("nobody") is None


def test_put_client_replaces_unless_told_not_to(place: Place) -> None:
    store = place.open_store()
    store.put_client(_client(client_name="first"))
    store.put_client(_client(client_name="second"))
    assert (found := store.client("client-1")) is not None and found.client_name == "second"
    store.put_client(_client(client_name="third"), replace=False)
    assert (found := store.client("client-1")) is not None and found.client_name == "second"


@pytest.mark.parametrize("hostile", ["nul\x00id", "\ud800", "x" * 10_000])
def test_a_client_id_no_stored_id_can_hold_finds_nothing(place: Place, hostile: str) -> None:
    assert place.open_store().client(hostile) is None


def test_registrations_count_against_the_total_but_preregistered_clients_do_not(place: Place) -> None:
    store = place.open_store()
    store.put_client(_client("preregistered"))
    store.register_client(_client("r1"), max_total=2, max_per_minute=10)
    place.open_store().register_client(_client("r2"), max_total=2, max_per_minute=10)
    with pytest.raises(RegistrationRefused) as refused:
        store.register_client(_client("r3"), max_total=2, max_per_minute=10)
    assert refused.value.kind == "total" and refused.value.limit == 2
    assert store.client("r2") is not None and store.client("r3") is None


def test_the_registration_rate_is_limited_with_a_retry_after(place: Place) -> None:
    store = place.open_store()
    for number in range(3):
        store.register_client(_client(f"r{number}"), max_total=100, max_per_minute=3)
    with pytest.raises(RegistrationRefused) as refused:
        place.open_store().register_client(_client("r9"), max_total=100, max_per_minute=3)
    assert refused.value.kind == "rate"
    assert refused.value.retry_after is not None and 1 <= refused.value.retry_after <= 60


def test_concurrent_registrations_from_two_processes_stay_within_the_quota(place: Place) -> None:
    stores = [place.open_store(), place.open_store()]
    barrier = threading.Barrier(RACERS * 2)

    def register(number: int) -> bool:
        barrier.wait()
        try:
            stores[number % 2].register_client(_client(f"r{number}"), max_total=5, max_per_minute=1_000)
        except RegistrationRefused:
            return False
        return True

    with ThreadPoolExecutor(max_workers=RACERS * 2) as pool:
        accepted = list(pool.map(register, range(RACERS * 2)))
    assert accepted.count(True) == 5


# --- authorization codes ---------------------------------------------------------------------------


def test_a_code_issued_by_one_process_is_redeemed_on_another_once(place: Place) -> None:
    stored = _code()
    place.open_store().put_code("the-code", stored)
    other = place.open_store()
    found = other.code("the-code", "client-1")
    assert found is not None
    assert (found.subject, found.tenant, found.scope, found.resource) == (
        "alice",
        "bank-a",
        "aml:read",
        "http://127.0.0.1:8000/mcp",
    )
    assert found.family == stored.family and found.code_sha256 == digest("the-code")
    assert found.get_redirect_uri() == "https://app.example/cb" and found.code_challenge == "c" * 43
    assert other.redeem_code(found.code_sha256)
    assert not place.open_store().redeem_code(found.code_sha256)


def test_a_code_is_only_for_its_client(place: Place) -> None:
    store = place.open_store()
    store.put_code("the-code", _code())
    assert store.code("the-code", "someone-else") is None
    assert store.code("the-code", "client-1") is not None


def test_unknown_and_hostile_codes_find_nothing(place: Place) -> None:
    store = place.open_store()
    for value in ("never-issued", "nul\x00code", "\udcff"):
        assert store.code(value, "client-1") is None
    assert not store.redeem_code(digest("never-issued"))


def test_a_code_is_never_stored_in_clear(place: Place) -> None:
    store = place.open_store()
    store.put_code("clear-code-value", _code())
    found = store.code("clear-code-value", "client-1")
    assert found is not None and "clear-code-value" not in repr(found)
    assert found.code_sha256 == digest("clear-code-value")


def test_an_expired_code_cannot_be_used(place: Place) -> None:
    store = place.open_store()
    store.put_code("the-code", _code())
    place.expire_all()
    assert store.code("the-code", "client-1") is None
    assert not store.redeem_code(digest("the-code"))


def test_a_replayed_code_revokes_every_refresh_token_of_its_family(place: Place) -> None:
    family = new_family()
    first, second = place.open_store(), place.open_store()
    first.put_code("the-code", _code(family))
    assert first.redeem_code(digest("the-code"))
    assert first.put_refresh_token("refresh-1", _grant(family), 3_600)
    assert second.refresh_token("refresh-1") is not None
    # Presented again, on the other process: the lookup itself recognises the replay.
    assert second.code("the-code", "client-1") is None
    assert first.refresh_token("refresh-1") is None
    # A token the winner stores afterwards into that family is born revoked.
    assert not first.put_refresh_token("refresh-2", _grant(family), 3_600)
    assert second.refresh_token("refresh-2") is None


def test_a_second_redemption_revokes_the_family_too(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    store.put_code("the-code", _code(family))
    assert store.redeem_code(digest("the-code"))
    assert store.put_refresh_token("refresh-1", _grant(family), 3_600)
    assert not place.open_store().redeem_code(digest("the-code"))
    assert store.refresh_token("refresh-1") is None


def test_concurrent_redemptions_of_one_code_from_two_processes_succeed_once(place: Place) -> None:
    stores = [place.open_store(), place.open_store()]
    for trial in range(3):
        code = f"code-{trial}"
        stores[0].put_code(code, _code())
        barrier = threading.Barrier(RACERS)

        def redeem(number: int, code: str = code, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return stores[number % 2].redeem_code(digest(code))

        with ThreadPoolExecutor(max_workers=RACERS) as pool:
            won = list(pool.map(redeem, range(RACERS)))
        assert won.count(True) == 1, won


def test_families_are_independent(place: Place) -> None:
    store = place.open_store()
    mine, theirs = new_family(), new_family()
    store.put_code("mine", _code(mine))
    store.put_code("theirs", _code(theirs))
    assert store.put_refresh_token("their-refresh", _grant(theirs), 3_600)
    assert store.redeem_code(digest("mine"))
    assert store.code("mine", "client-1") is None  # replay: revokes `mine` only
    assert store.refresh_token("their-refresh") is not None
    assert store.code("theirs", "client-1") is not None


# --- refresh tokens --------------------------------------------------------------------------------


def test_a_refresh_token_rotated_on_one_process_and_replayed_on_another_revokes_the_family(
    place: Place,
) -> None:
    family = new_family()
    a, b = place.open_store(), place.open_store()
    assert a.put_refresh_token("refresh-1", _grant(family), 3_600)
    found = a.refresh_token("refresh-1")
    assert found is not None and found.family == family and found.token_sha256 == digest("refresh-1")
    assert a.redeem_refresh_token(found.token_sha256)
    assert a.put_refresh_token("refresh-2", _grant(family), 3_600)
    assert b.refresh_token("refresh-2") is not None
    # The rotated-out token comes back on B: refused, and its successor stops working too.
    assert b.refresh_token("refresh-1") is None
    assert a.refresh_token("refresh-2") is None
    assert not a.put_refresh_token("refresh-3", _grant(family), 3_600)


def test_a_second_rotation_of_one_refresh_token_revokes_the_family(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    store.put_refresh_token("refresh-1", _grant(family), 3_600)
    assert store.redeem_refresh_token(digest("refresh-1"))
    store.put_refresh_token("refresh-2", _grant(family), 3_600)
    assert not place.open_store().redeem_refresh_token(digest("refresh-1"))
    assert store.refresh_token("refresh-2") is None


def test_concurrent_rotations_of_one_refresh_token_from_two_processes_succeed_once(place: Place) -> None:
    stores = [place.open_store(), place.open_store()]
    for trial in range(3):
        token = f"refresh-{trial}"
        stores[0].put_refresh_token(token, _grant(new_family()), 3_600)
        barrier = threading.Barrier(RACERS)

        def rotate(number: int, token: str = token, barrier: threading.Barrier = barrier) -> bool:
            barrier.wait()
            return stores[number % 2].redeem_refresh_token(digest(token))

        with ThreadPoolExecutor(max_workers=RACERS) as pool:
            won = list(pool.map(rotate, range(RACERS)))
        assert won.count(True) == 1, won


def test_two_processes_rotating_one_refresh_token_at_once_leave_no_live_successor(place: Place) -> None:
    """The loser of the race is a reuse: it revokes the family, and the winner's successor, stored
    before or after that revocation, never works (RFC 9700 §4.14.2: no fork of a revoked grant)."""
    stores = [place.open_store(), place.open_store()]
    for trial in range(5):
        family = new_family()
        stores[0].put_refresh_token(f"start-{trial}", _grant(family), 3_600)
        barrier = threading.Barrier(2)

        def rotate(
            number: int, trial: int = trial, family: str = family, barrier: threading.Barrier = barrier
        ) -> bool:
            barrier.wait()
            if not stores[number].redeem_refresh_token(digest(f"start-{trial}")):
                return False
            stores[number].put_refresh_token(f"next-{trial}-{number}", _grant(family), 3_600)
            return True

        with ThreadPoolExecutor(max_workers=2) as pool:
            won = list(pool.map(rotate, range(2)))
        assert won.count(True) == 1, won
        for number in range(2):
            assert stores[1 - number].refresh_token(f"next-{trial}-{number}") is None


def test_used_codes_are_remembered_while_old_ones_are_forgotten(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    store.put_code("used-code", _code(family))
    assert store.redeem_code(digest("used-code"))
    store.put_refresh_token("refresh-1", _grant(family), 3_600)
    store.put_code("another-code", _code())  # housekeeping runs here
    assert store.code("used-code", "client-1") is None  # still recognised as a replay
    assert store.refresh_token("refresh-1") is None


def test_an_expired_or_unknown_refresh_token_finds_nothing(place: Place) -> None:
    store = place.open_store()
    store.put_refresh_token("refresh-1", _grant(new_family()), 3_600)
    assert store.refresh_token("never-issued") is None
    assert store.refresh_token("nul\x00token") is None
    place.expire_all()
    assert store.refresh_token("refresh-1") is None
    assert not store.redeem_refresh_token(digest("refresh-1"))


def test_a_refresh_token_without_a_family_starts_its_own(place: Place) -> None:
    store = place.open_store()
    assert store.put_refresh_token("refresh-1", _grant(""), 3_600)
    found = store.refresh_token("refresh-1")
    assert found is not None and found.family


# --- PostgreSQL only -------------------------------------------------------------------------------


def test_postgres_refuses_to_store_what_text_cannot_hold_with_a_value_error() -> None:
    with scratch_schema() as (url, schema):
        store = PostgresDevStore(DevAuthDatabase(PostgresDatabase(url, schema=schema)).open())
        try:
            with pytest.raises(UnstorableValue):
                store.put_code("the-code", _code(resource="http://127.0.0.1:8000/mcp\x00"))
            with pytest.raises(ValueError, match="NUL"):
                store.put_client(_client("nul\x00client"))
            assert store.code("the-code", "client-1") is None
        finally:
            store.close()


def test_postgres_tables_are_not_readable_by_public() -> None:
    with scratch_schema() as (url, schema):
        PostgresDevStore(DevAuthDatabase(PostgresDatabase(url, schema=schema)).open()).close()
        with psycopg.connect(url) as conn:
            for table in (
                "devauth_clients",
                "devauth_codes",
                "devauth_refresh_tokens",
                "devauth_signing_keys",
            ):
                row = conn.execute(
                    "SELECT has_table_privilege('public', %s, 'SELECT')", (f"{schema}.{table}",)
                ).fetchone()
                assert row == (False,), table


def test_postgres_stores_opening_at_once_create_the_tables_once() -> None:
    with scratch_schema() as (url, schema):
        shared = PostgresDatabase(url, schema=schema)
        with ThreadPoolExecutor(max_workers=4) as pool:
            stores = list(pool.map(lambda _: PostgresDevStore(DevAuthDatabase(shared).open()), range(4)))
        try:
            stores[0].put_client(_client())
            assert all(store.client("client-1") is not None for store in stores)
        finally:
            for store in stores:
                store.close()
