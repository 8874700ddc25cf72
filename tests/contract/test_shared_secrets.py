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

from aml_mcp.shared_secrets.storage import SecretSource
from aml_mcp.shared_secrets.storage.files import FilesSecrets
from aml_mcp.shared_secrets.storage.postgres import APPLICATION_NAME, PostgresSecrets
from aml_mcp.store.locks import AdvisoryLock
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema
from tests.support.waiting import eventually

Sources = Callable[[], SecretSource]
"""A new source over the one shared place (as a freshly started process would build it)."""


@pytest.fixture(params=["files", "postgres"])
def sources(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Sources]:
    if request.param == "files":
        yield lambda: FilesSecrets(tmp_path / "keys")
        return
    with scratch_schema() as (url, schema):
        yield lambda: PostgresSecrets(PostgresDatabase(url, schema=schema))


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
        PostgresSecrets(PostgresDatabase(url, schema=schema)).secret("request-state")
        with psycopg.connect(url) as conn:
            row = conn.execute(
                "SELECT has_table_privilege('public', %s, 'SELECT')", (f"{schema}.shared_secrets",)
            ).fetchone()
    assert row == (False,)


def test_creating_a_secret_waits_only_for_another_secret_being_created() -> None:
    # The demo corpus's first load holds its lock for up to a minute; it once shared the secrets'
    # key, so a replica creating a secret waited for another replica's load.
    others = [lock for lock in AdvisoryLock if lock not in (AdvisoryLock.SECRETS, AdvisoryLock.MIGRATION)]
    with (
        scratch_schema() as (url, schema),
        ThreadPoolExecutor(max_workers=1) as thread,
        psycopg.connect(url, autocommit=True) as holder,  # closed first: a stuck creation ends
    ):

        def waiting() -> int:
            row = holder.execute(
                "SELECT COUNT(*) FROM pg_locks JOIN pg_stat_activity USING (pid)"
                " WHERE locktype = 'advisory' AND NOT granted AND application_name = %s",
                (APPLICATION_NAME,),
            ).fetchone()
            return int(row[0]) if row is not None else 0

        source = PostgresSecrets(PostgresDatabase(url, schema=schema))
        for lock in others:  # as another replica would, loading a bank or registering a client
            holder.execute("SELECT pg_advisory_lock(%s)", (lock,))
        assert len(thread.submit(source.secret, "request-state").result(timeout=10)) == 32
        # The wait is there, and ends, while another replica creates a secret.
        holder.execute("SELECT pg_advisory_lock(%s)", (AdvisoryLock.SECRETS,))
        creating = thread.submit(source.secret, "form-key")
        eventually(waiting, until=lambda count: count == 1, what="the creation to wait for the lock")
        holder.execute("SELECT pg_advisory_unlock_all()")
        assert len(creating.result(timeout=10)) == 32


def test_the_directory_secret_file_is_owner_only(tmp_path: Path) -> None:
    FilesSecrets(tmp_path / "keys").secret("request-state")
    assert (tmp_path / "keys" / "request-state.key").stat().st_mode & 0o077 == 0
