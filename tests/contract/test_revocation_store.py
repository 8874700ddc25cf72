"""Every `RevocationStore` behaviour, on SQLite and on PostgreSQL alike, and the PostgreSQL
store's notification: sent by the committing transaction, only when something changed."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import psycopg
import pytest

from aml_mcp.auth.storage import RevocationStore
from aml_mcp.auth.storage import postgres as postgres_revocations
from aml_mcp.auth.storage.postgres import PostgresRevocationStore
from aml_mcp.auth.storage.sqlite import REVOCATION_COMPONENT, REVOCATION_MIGRATIONS, SqliteRevocationStore
from aml_mcp.store.sqlite import SqliteDatabase
from tests.support.postgres import scratch_database

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RevocationStore]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "auth.db")
        db.open()
        await db.migrate(REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)
        try:
            yield SqliteRevocationStore(db)
        finally:
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_revocations.MIGRATION)
        yield PostgresRevocationStore(pg)


async def test_an_added_revocation_is_listed_with_its_note_and_time(store: RevocationStore) -> None:
    await store.add("jti", "", "token-1", "leaked")
    await store.add("subject", "https://issuer.example", "alice", None)
    entries = await store.entries()
    assert [(e.kind, e.issuer, e.value, e.note) for e in entries] == [
        ("jti", "", "token-1", "leaked"),
        ("subject", "https://issuer.example", "alice", None),
    ]
    assert all(e.revoked_at.endswith("Z") and "T" in e.revoked_at for e in entries)


async def test_adding_twice_keeps_one_entry_and_the_fingerprint(store: RevocationStore) -> None:
    await store.add("jti", "", "token-1", "first")
    before = await store.fingerprint()
    await store.add("jti", "", "token-1", "second")
    assert await store.fingerprint() == before
    assert [e.note for e in await store.entries()] == ["first"]


async def test_the_fingerprint_changes_on_every_add_and_lift(store: RevocationStore) -> None:
    empty = await store.fingerprint()
    await store.add("jti", "", "a", None)
    one = await store.fingerprint()
    assert one != empty
    assert await store.lift("jti", "", "a")
    lifted = await store.fingerprint()
    assert lifted != one
    await store.add("jti", "", "b", None)
    assert await store.fingerprint() not in (empty, one, lifted)


async def test_lift_matches_kind_issuer_and_value(store: RevocationStore) -> None:
    await store.add("subject", "https://a.example", "alice", None)
    assert not await store.lift("subject", "https://b.example", "alice")
    assert not await store.lift("jti", "https://a.example", "alice")
    assert await store.lift("subject", "https://a.example", "alice")
    assert not await store.lift("subject", "https://a.example", "alice")
    assert await store.entries() == []


async def test_a_revocation_with_an_expiry_is_dropped_by_a_later_add_once_expired(
    store: RevocationStore,
) -> None:
    await store.add("jti", "https://issuer.example", "short", "replayed grant", time.time() + 0.3)
    await store.add("jti", "https://issuer.example", "long", None, time.time() + 3_600)
    await store.add("jti", "", "forever", None)
    assert {e.value for e in await store.entries()} == {"short", "long", "forever"}
    await anyio.sleep(0.4)
    await store.add("subject", "https://issuer.example", "alice", None)
    assert {e.value for e in await store.entries()} == {"long", "forever", "alice"}


async def test_postgres_notifies_after_commit_and_only_on_a_change() -> None:
    async with scratch_database() as pg:
        await pg.apply(postgres_revocations.MIGRATION)
        store = PostgresRevocationStore(pg)
        async with await psycopg.AsyncConnection.connect(pg.url, autocommit=True) as listener:
            await listener.execute(f'LISTEN "{store.channel}"')
            await store.add("jti", "", "a", None)
            await store.add("jti", "", "a", None)  # no change: no notification
            await store.lift("jti", "", "missing")  # no change either
            await store.lift("jti", "", "a")
            got = [n.channel async for n in listener.notifies(timeout=0.5)]
        assert got == [store.channel, store.channel]
        assert store.channel == f"aml_revocations__{pg.schema}"


async def test_postgres_channels_are_per_schema() -> None:
    async with scratch_database() as first, scratch_database() as second:
        assert PostgresRevocationStore(first).channel != PostgresRevocationStore(second).channel
