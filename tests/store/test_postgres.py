"""The PostgreSQL database: schema per deployment, append-only migrations, its clock, failures."""

from __future__ import annotations

import socket
import time

import anyio
import psycopg
import pytest

from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PoolBudget, PostgresDatabase, redacted, storage_fault
from aml_mcp.tasks.storage import StorageUnavailable
from aml_mcp.tasks.storage.postgres import MIGRATION, PostgresTaskStore
from tests.support.postgres import scratch_database, scratch_schema
from tests.tasks.factories import owner

pytestmark = pytest.mark.anyio

STEPS = Migration(
    "widgets", ["CREATE TABLE widgets (id INT PRIMARY KEY)", "ALTER TABLE widgets ADD COLUMN n INT"]
)


async def test_migrations_are_recorded_and_applied_once_even_by_concurrent_starts() -> None:
    with scratch_schema() as (url, schema):
        databases = [PostgresDatabase(url, schema=schema) for _ in range(3)]
        for database in databases:
            await database.open()
        try:
            versions: list[int] = []

            async def migrate(database: PostgresDatabase) -> None:
                versions.append(await database.apply(STEPS))

            async with anyio.create_task_group() as group:
                for database in databases:
                    group.start_soon(migrate, database)
            assert versions == [2, 2, 2]
            async with databases[0].transaction() as conn:
                cursor = await conn.execute(
                    "SELECT version FROM schema_migrations WHERE component = 'widgets' ORDER BY version"
                )
                assert [row[0] for row in await cursor.fetchall()] == [1, 2]
                await conn.execute("INSERT INTO widgets (id, n) VALUES (1, 2)")
            longer = Migration("widgets", [*STEPS.steps, "ALTER TABLE widgets ADD COLUMN m INT"])
            assert await databases[1].apply(longer) == 3
        finally:
            for database in databases:
                await database.close()


async def test_each_schema_is_a_world_of_its_own() -> None:
    async with scratch_database() as first, scratch_database() as second:
        await first.apply(STEPS)
        async with first.transaction() as conn:
            await conn.execute("INSERT INTO widgets (id) VALUES (1)")
        await second.apply(STEPS)
        async with second.transaction() as conn:
            row = await (await conn.execute("SELECT COUNT(*) FROM widgets")).fetchone()
        assert row is not None and row[0] == 0


async def test_statements_sent_together_commit_as_one_transaction_or_not_at_all() -> None:
    async with scratch_database() as database:
        await database.apply(STEPS)
        insert = "INSERT INTO widgets (id) VALUES (%s) RETURNING txid_current()"
        answers = await database.execute_together([(insert, (1,)), (insert, (2,)), (insert, (3,))])
        assert len({rows[0][0] for rows in answers}) == 1  # one transaction id: one commit
        with pytest.raises(psycopg.errors.UniqueViolation):
            await database.execute_together([(insert, (4,)), (insert, (1,)), (insert, (5,))])
        # The refused statement took the others with it, and the connection is fit for the next caller.
        for _ in range(database.pool.max_size + 1):
            rows = await database.execute("SELECT id FROM widgets ORDER BY id")
            assert [row[0] for row in rows] == [1, 2, 3]
        answers = await database.execute_together([(insert, (4,))])
        assert len(answers) == 1 and len(answers[0]) == 1


async def test_now_is_the_database_clock() -> None:
    async with scratch_database() as database:
        before = time.time_ns() // 1_000_000
        now = await database.now_ms()
        after = time.time_ns() // 1_000_000
    # Same host here, so the two clocks agree to within the round trip (and scheduling).
    assert before - 1000 <= now <= after + 1000


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_an_unreachable_server_is_a_clear_error_without_the_password() -> None:
    url = f"postgresql://aml:hunter2@127.0.0.1:{_closed_port()}/aml"
    database = PostgresDatabase(url, budget=PoolBudget(connect_timeout_seconds=1))
    with pytest.raises(psycopg.OperationalError) as caught:
        await database.open()
    assert "hunter2" not in str(caught.value)
    assert storage_fault(caught.value) == "database unreachable"
    assert "hunter2" not in redacted(url) and "127.0.0.1" in redacted(url)


async def test_a_lost_database_is_storage_unavailable_for_the_task_store() -> None:
    async with scratch_database() as database:
        await database.apply(MIGRATION)
        store = PostgresTaskStore(database)
        assert await store.find("t", owner(), 0) is None
        await database.close()
        with pytest.raises(StorageUnavailable):
            await store.find("t", owner(), 0)


async def test_a_terminated_connection_is_storage_unavailable_then_recovers() -> None:
    async with scratch_database() as database:
        await database.apply(MIGRATION)
        store = PostgresTaskStore(database)
        async with database.transaction() as conn:
            await conn.execute("SELECT 1")
        with psycopg.connect(database.url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'aml-mcp' AND pid <> pg_backend_pid()"
                " AND query_start IS NOT NULL AND current_setting('search_path') IS NOT NULL"
                " AND pid = ANY(%s)",
                ([c.info.backend_pid for c in database.pool._pool],),
            )
        outcomes: list[str] = []
        for _ in range(3):
            try:
                await store.find("t", owner(), 0)
                outcomes.append("ok")
            except StorageUnavailable:
                outcomes.append("unavailable")
        assert outcomes == ["unavailable", "ok", "ok"]  # one retryable failure, then a fresh connection


def test_a_schema_must_be_a_plain_identifier() -> None:
    with pytest.raises(ValueError, match="identifier"):
        PostgresDatabase("postgresql://x@127.0.0.1/db", schema="public; DROP TABLE x")
    with pytest.raises(ValueError, match="postgresql://"):
        PostgresDatabase("sqlite:///tmp/x.db")
