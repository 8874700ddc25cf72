"""The development issuer's signing keys, in the data directory and in PostgreSQL.

`place()` opens the keys anew over the one shared place, as another process would: every process
must sign with the same key, publish the same JWKS, agree on one key when all start at once, and
notice a rotation another one made (the old key staying published).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jwt
import pytest

from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.storage.postgres import PostgresKeyStorage, open_database
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.postgres_sync import SyncPostgres
from tests.support.postgres import scratch_schema

Keys = Callable[[], DevSigningKeys]


@pytest.fixture(params=["sqlite", "postgres"])
def keys(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Keys]:
    if request.param == "sqlite":
        yield lambda: DevSigningKeys.in_data_dir(tmp_path)
        return
    opened: list[SyncPostgres] = []
    with scratch_schema() as (url, schema):
        shared = PostgresDatabase(url, schema=schema)

        def open_keys() -> DevSigningKeys:
            database = open_database(shared, max_size=1)
            opened.append(database)
            return DevSigningKeys(PostgresKeyStorage(database))

        try:
            yield open_keys
        finally:
            for database in opened:
                database.close()


def _verify(token: str, jwks: dict[str, object]) -> dict[str, object]:
    kid = jwt.get_unverified_header(token)["kid"]
    key = jwt.PyJWKSet.from_dict(jwks)[kid]
    return dict(jwt.decode(token, key.key, algorithms=["RS256"], options={"verify_aud": False}))


def test_two_processes_publish_the_same_jwks_and_verify_each_others_tokens(keys: Keys) -> None:
    a, b = keys(), keys()
    assert a.jwks() == b.jwks()
    assert len(a.jwks()["keys"]) == 1 and a.current_kid == b.current_kid
    token = a.sign({"sub": "alice"})
    assert _verify(token, b.jwks())["sub"] == "alice"
    assert jwt.get_unverified_header(token)["typ"] == "at+jwt"


def test_processes_starting_at_once_agree_on_one_key(keys: Keys) -> None:
    with ThreadPoolExecutor(max_workers=6) as pool:
        kids = list(pool.map(lambda _: keys().current_kid, range(6)))
    assert len(set(kids)) == 1


def test_a_rotation_is_noticed_by_the_other_process_and_old_tokens_still_verify(keys: Keys) -> None:
    a, b = keys(), keys()
    old_token = b.sign({"sub": "alice"})
    old_kid = b.current_kid
    new_kid = a.rotate()
    assert new_kid != old_kid
    assert b.current_kid == new_kid
    published = {key["kid"] for key in b.jwks()["keys"]}
    assert published == {old_kid, new_kid}
    assert _verify(old_token, b.jwks())["sub"] == "alice"
    assert jwt.get_unverified_header(b.sign({"sub": "bob"}))["kid"] == new_kid


def test_concurrent_rotations_keep_every_new_key(keys: Keys) -> None:
    assert keys().current_kid  # the first key exists
    with ThreadPoolExecutor(max_workers=2) as pool:
        new = set(pool.map(lambda _: keys().rotate(), range(2)))
    published = {key["kid"] for key in keys().jwks()["keys"]}
    if isinstance(keys().storage, PostgresKeyStorage):
        assert new <= published  # rows are locked while rotating: no rotation is lost
    assert keys().current_kid in new


def test_only_the_newest_three_keys_stay_published(keys: Keys) -> None:
    first = keys()
    original = first.current_kid
    for _ in range(3):
        first.rotate()
    published = {key["kid"] for key in keys().jwks()["keys"]}
    assert len(published) == 3 and original not in published


def test_the_jwks_holds_no_private_part(keys: Keys) -> None:
    for key in keys().jwks()["keys"]:
        assert {"d", "p", "q", "dp", "dq", "qi"}.isdisjoint(key)
