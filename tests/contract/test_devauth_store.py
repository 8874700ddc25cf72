"""Every `DevAuthStore` behaviour, on the SQLite file and on PostgreSQL.

`place.open_store()` opens a new store over the one shared place, as another process (a replica
behind the load balancer, or `aml-mcp devauth …`) would: two of them stand for two processes.
On PostgreSQL each store has connections of its own, so the races below run across connections.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from aml_mcp.devauth.login_limits import LoginLimits, address_key, user_key
from aml_mcp.devauth.storage import (
    DevAuthStore,
    DevClient,
    Grant,
    RegistrationRefused,
    StoredCode,
    UnstorableValue,
    digest,
    new_family,
)
from aml_mcp.devauth.storage.postgres import MIGRATION, PostgresDevAuthStore, open_database
from aml_mcp.devauth.storage.sqlite import SqliteDevAuthStore
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.postgres_sync import SyncPostgres
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

            yield Place("sqlite", lambda: keep(SqliteDevAuthStore(path)), expire_sqlite)
            return
        with scratch_schema() as (url, schema):
            shared = PostgresDatabase(url, schema=schema)

            def expire_postgres() -> None:
                with psycopg.connect(url, options=f"-c search_path={schema}") as conn:
                    conn.execute("UPDATE devauth_codes SET expires_at = 0")
                    conn.execute("UPDATE devauth_refresh_tokens SET expires_at = 0")

            yield Place(
                "postgres", lambda: keep(PostgresDevAuthStore(open_database(shared))), expire_postgres
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


# --- access tokens of grant families ---------------------------------------------------------------


def _later(seconds: float = 3_600) -> float:
    return time.time() + seconds


def _revoked_jtis(store: DevAuthStore) -> set[str]:
    return {token.jti for token in store.revoked_access_tokens(1_000)}


def test_a_replayed_code_revokes_the_access_tokens_of_its_family_on_every_process(place: Place) -> None:
    family, other = new_family(), new_family()
    a, b = place.open_store(), place.open_store()
    a.put_code("the-code", _code(family))
    assert a.redeem_code(digest("the-code"))
    assert a.remember_access_token("jti-1", family, _later())
    assert b.remember_access_token("jti-2", family, _later())
    assert a.remember_access_token("jti-other", other, _later())
    assert _revoked_jtis(a) == set()  # nothing revoked yet: nothing to publish
    assert b.code("the-code", "client-1") is None  # the replay, on the other process
    revoked = a.revoked_access_tokens(1_000)
    assert {token.jti for token in revoked} == {"jti-1", "jti-2"}
    assert all(token.keep_until > time.time() + 3_000 for token in revoked)
    # Published (by either process): gone from the outbox for both.
    b.forget_access_tokens(["jti-1", "jti-2"])
    assert _revoked_jtis(a) == set()


def test_an_access_token_minted_into_a_revoked_family_is_born_revoked(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    store.put_code("the-code", _code(family))
    assert store.redeem_code(digest("the-code"))
    assert not place.open_store().redeem_code(digest("the-code"))  # second redemption revokes
    assert not store.remember_access_token("late-jti", family, _later())
    assert _revoked_jtis(place.open_store()) == {"late-jti"}


def test_a_reused_refresh_token_revokes_the_family_access_tokens(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    assert store.put_refresh_token("refresh-1", _grant(family), 3_600)
    assert store.redeem_refresh_token(digest("refresh-1"))
    assert store.remember_access_token("jti-1", family, _later())
    assert place.open_store().refresh_token("refresh-1") is None  # reuse
    assert _revoked_jtis(store) == {"jti-1"}


def test_access_tokens_past_their_keep_until_are_neither_listed_nor_kept(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    store.put_code("the-code", _code(family))
    assert store.redeem_code(digest("the-code"))
    assert store.remember_access_token("expired", family, time.time() - 1)
    assert store.remember_access_token("live", family, _later())
    assert store.code("the-code", "client-1") is None
    assert _revoked_jtis(store) == {"live"}


def test_the_outbox_is_read_in_batches(place: Place) -> None:
    family = new_family()
    store = place.open_store()
    for number in range(5):
        store.remember_access_token(f"jti-{number}", family, _later(number + 100))
    store.put_code("the-code", _code(family))
    assert store.redeem_code(digest("the-code")) and not store.redeem_code(digest("the-code"))
    first = store.revoked_access_tokens(2)
    assert [token.jti for token in first] == ["jti-0", "jti-1"]  # soonest to expire first
    store.forget_access_tokens([token.jti for token in first])
    assert _revoked_jtis(store) == {"jti-2", "jti-3", "jti-4"}


# --- sign-in attempts ------------------------------------------------------------------------------

STRICT = LoginLimits(
    max_failures_per_user=3, max_failures_per_address=5, backoff_base_seconds=60, backoff_max_seconds=600
)


def test_a_user_is_backed_off_after_its_attempts_on_every_process(place: Place) -> None:
    a, b = place.open_store(), place.open_store()
    keys = [address_key("10.0.0.1"), user_key("carol")]
    for store in (a, b, a):
        assert store.admit_login(keys, STRICT) == 0
    wait = b.admit_login([address_key("10.0.0.2"), user_key("carol")], STRICT)
    assert 55 < wait <= 60  # another address: the user's count still holds
    assert a.admit_login([address_key("10.0.0.2"), user_key("dave")], STRICT) == 0


def test_a_refused_attempt_counts_nothing(place: Place) -> None:
    store = place.open_store()
    for _ in range(3):
        assert store.admit_login([user_key("carol")], STRICT) == 0
    for _ in range(10):
        assert store.admit_login([address_key("10.0.0.1"), user_key("carol")], STRICT) > 0
    # The address took part only in refused attempts: it has all five of its own left.
    for _ in range(5):
        assert store.admit_login([address_key("10.0.0.1")], STRICT) == 0
    assert store.admit_login([address_key("10.0.0.1")], STRICT) > 0


def test_the_backoff_doubles_with_each_further_failure_up_to_its_cap(place: Place) -> None:
    limits = LoginLimits(
        max_failures_per_user=2, backoff_base_seconds=0.4, backoff_max_seconds=1.0, memory_seconds=60
    )
    store = place.open_store()
    key = [user_key("carol")]
    assert store.admit_login(key, limits) == 0 and store.admit_login(key, limits) == 0
    waits: list[float] = []
    for _ in range(3):
        wait = store.admit_login(key, limits)
        assert wait > 0
        waits.append(wait)
        time.sleep(wait + 0.05)
        assert store.admit_login(key, limits) == 0  # the attempt after the backoff counts again
    # 0.4, 0.8, then 1.6 capped at 1.0 (less the moment between the two calls).
    assert 0.1 < waits[0] <= 0.4 < waits[1] <= 0.8 < waits[2] <= 1.0


def test_a_successful_sign_in_resets_the_user_and_does_not_count_for_the_address(place: Place) -> None:
    store = place.open_store()
    user, address = user_key("carol"), address_key("10.0.0.1")
    for _ in range(2):
        assert store.admit_login([address, user], STRICT) == 0
    for _ in range(10):  # ten good sign-ins from one address
        assert store.admit_login([address, user], STRICT) == 0
        place.open_store().login_succeeded(reset=[user], uncount=[address])
    for _ in range(3):
        assert store.admit_login([address, user], STRICT) == 0
    assert store.admit_login([address, user], STRICT) > 0  # the user's three, from zero
    # The address counted its 2 + 3 failures only: one more is refused.
    assert store.admit_login([address], STRICT) > 0


def test_concurrent_attempts_from_two_processes_get_exactly_the_allowed_ones(place: Place) -> None:
    stores = [place.open_store(), place.open_store()]
    barrier = threading.Barrier(RACERS * 2)

    def attempt(number: int) -> bool:
        barrier.wait()
        return (
            stores[number % 2].admit_login([address_key(f"10.0.0.{number}"), user_key("carol")], STRICT) == 0
        )

    with ThreadPoolExecutor(max_workers=RACERS * 2) as pool:
        admitted = list(pool.map(attempt, range(RACERS * 2)))
    assert admitted.count(True) == STRICT.max_failures_per_user


def test_an_old_entry_is_forgotten(place: Place) -> None:
    limits = LoginLimits(
        max_failures_per_user=1, backoff_base_seconds=0.3, backoff_max_seconds=0.3, memory_seconds=0.3
    )
    store = place.open_store()
    assert store.admit_login([user_key("carol")], limits) == 0
    assert store.admit_login([user_key("carol")], limits) > 0
    time.sleep(0.35)
    assert store.admit_login([user_key("carol")], limits) == 0  # counting afresh
    assert store.admit_login([user_key("carol")], limits) > 0


def test_the_limiter_keeps_at_most_its_entries_the_newest(place: Place) -> None:
    limits = LoginLimits(max_failures_per_address=1, backoff_base_seconds=60, max_entries=3)
    store = place.open_store()
    assert store.admit_login([address_key("10.0.0.1")], limits) == 0
    assert store.admit_login([address_key("10.0.0.1")], limits) > 0
    for number in range(2, 5):  # three newer addresses push the first one out
        time.sleep(0.01)
        assert store.admit_login([address_key(f"10.0.0.{number}")], limits) == 0
    assert store.admit_login([address_key("10.0.0.4")], limits) > 0  # kept: still backed off
    assert store.admit_login([address_key("10.0.0.1")], limits) == 0  # forgotten


# --- PostgreSQL only -------------------------------------------------------------------------------


def test_postgres_refuses_to_store_what_text_cannot_hold_with_a_value_error() -> None:
    with scratch_schema() as (url, schema):
        store = PostgresDevAuthStore(open_database(PostgresDatabase(url, schema=schema)))
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
        PostgresDevAuthStore(open_database(PostgresDatabase(url, schema=schema))).close()
        with psycopg.connect(url) as conn:
            for table in (
                "devauth_clients",
                "devauth_codes",
                "devauth_refresh_tokens",
                "devauth_signing_keys",
                "devauth_access_tokens",
                "devauth_login_attempts",
            ):
                row = conn.execute(
                    "SELECT has_table_privilege('public', %s, 'SELECT')", (f"{schema}.{table}",)
                ).fetchone()
                assert row == (False,), table


def test_postgres_stores_opening_at_once_create_the_tables_once() -> None:
    with scratch_schema() as (url, schema):
        shared = PostgresDatabase(url, schema=schema)
        with ThreadPoolExecutor(max_workers=4) as pool:
            stores = list(pool.map(lambda _: PostgresDevAuthStore(open_database(shared)), range(4)))
        try:
            stores[0].put_client(_client())
            assert all(store.client("client-1") is not None for store in stores)
        finally:
            for store in stores:
                store.close()


def test_postgres_tables_of_an_earlier_step_are_brought_up_to_date_keeping_their_rows() -> None:
    """A database a replica of an earlier release set up (the first step only) gets the later steps,
    each recorded, and keeps the clients it held."""
    with scratch_schema() as (url, schema):
        shared = PostgresDatabase(url, schema=schema)
        with SyncPostgres(shared, name="aml-mcp-earlier-release", max_size=1) as earlier:
            assert earlier.apply(Migration(MIGRATION.component, MIGRATION.steps[:1])) == 1
            with earlier.connection() as conn:
                conn.execute(
                    "INSERT INTO devauth_clients (client_id, metadata, issued_at) VALUES (%s, %s, 0)",
                    ("client-1", '{"redirect_uris": ["https://app.example/cb"]}'),
                )
        store = PostgresDevAuthStore(open_database(shared))
        try:
            client = store.client("client-1")
            assert client is not None and client.redirect_uris == ("https://app.example/cb",)
            assert store.remember_access_token("jti-1", new_family(), time.time() + 60)  # step 2 table
            with store.database.connection() as conn:
                versions = conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = %s ORDER BY version",
                    (MIGRATION.component,),
                ).fetchall()
            assert [version for (version,) in versions] == list(range(1, len(MIGRATION.steps) + 1))
        finally:
            store.close()
