"""Every `SecretSource` behaviour, with files in a data directory and with a PostgreSQL table.

Two sources over the same place stand for two processes of one deployment: they must agree on
every secret, including when they all create it at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from aml_mcp.secrets_store import DirectorySecrets, PostgresSecrets, SecretSource
from tests.support.postgres import scratch_schema

Sources = Callable[[], SecretSource]
"""A new source over the one shared place (as a freshly started process would build it)."""


@pytest.fixture(params=["sqlite", "postgres"])
def sources(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sources]:
    if request.param == "sqlite":
        yield lambda: DirectorySecrets(tmp_path / "keys")
        return
    with scratch_schema() as (url, schema):
        yield lambda: PostgresSecrets(url, schema=schema)


def test_two_processes_read_the_same_secret(sources: Sources) -> None:
    first = sources().secret("request-state")
    assert len(first) == 32
    assert sources().secret("request-state") == first


def test_different_names_are_different_secrets(sources: Sources) -> None:
    source = sources()
    assert source.secret("request-state") != source.secret("other-purpose")
    assert len(source.secret("longer", nbytes=64)) == 64


def test_concurrent_first_use_agrees_on_one_value(sources: Sources) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        values = list(pool.map(lambda _: sources().secret("request-state"), range(16)))
    assert len(set(values)) == 1


def test_a_stored_secret_too_short_for_the_request_is_refused(sources: Sources) -> None:
    sources().secret("short", nbytes=16)
    with pytest.raises(ValueError, match="shorter"):
        sources().secret("short", nbytes=32)


@pytest.mark.parametrize("name", ["../escape", "Upper", "", "a/b", "x" * 64])
def test_names_that_could_walk_a_path_are_refused(sources: Sources, name: str) -> None:
    with pytest.raises(ValueError, match="secret name"):
        sources().secret(name)


def test_the_postgres_table_is_not_readable_by_public() -> None:
    with scratch_schema() as (url, schema):
        PostgresSecrets(url, schema=schema).secret("request-state")
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT has_table_privilege('public', %s, 'SELECT')", (f"{schema}.shared_secrets",)
            ).fetchone()
    assert row == (False,)


def test_the_directory_secret_file_is_owner_only(tmp_path: Path) -> None:
    DirectorySecrets(tmp_path / "keys").secret("request-state")
    assert (tmp_path / "keys" / "request-state.key").stat().st_mode & 0o077 == 0
