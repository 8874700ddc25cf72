"""A statement on the pool outlives its caller's cancellation (D8): cancelled mid-statement (a client
hung up), it finishes and its connection goes back to the pool, where psycopg used to close it; a
transaction likewise; and a statement past its bound fails as a storage fault, not a hang."""

from __future__ import annotations

import anyio
import psycopg
import pytest

from aml_mcp.store import postgres
from aml_mcp.store.faults import storage_fault
from aml_mcp.store.postgres import PoolBudget, PostgresDatabase
from tests.support.postgres import scratch_database

pytestmark = pytest.mark.anyio


async def backend(database: PostgresDatabase) -> int:
    return int((await database.execute("SELECT pg_backend_pid()"))[0][0])


async def test_a_cancelled_statement_or_transaction_finishes_and_keeps_its_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with scratch_database() as database:
        pid = await backend(database)  # a pool of one: the same connection every time
        assert database.budget.min_size == 1
        for _ in range(3):
            with anyio.move_on_after(0.05) as cancelled:
                await database.execute("SELECT pg_sleep(0.3)")
            assert cancelled.cancelled_caught  # the caller's cancellation took effect afterwards
            with anyio.move_on_after(0.05) as cancelled:
                async with database.transaction() as conn:
                    await conn.execute("SELECT pg_sleep(0.3)")
            assert cancelled.cancelled_caught
        stats = database.pool.get_stats()
        assert stats.get("returns_bad", 0) == 0 and stats.get("connections_lost", 0) == 0, stats
        assert await backend(database) == pid
    assert not [r for r in caplog.records if "closing connection" in r.getMessage()]


async def test_a_statement_past_its_bound_fails_as_a_storage_fault(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(postgres, "STATEMENT_SECONDS", 0.2)
    async with scratch_database() as database:
        database.budget = PoolBudget(wait_seconds=0.1)
        with pytest.raises(psycopg.errors.QueryCanceled) as raised:
            await database.execute("SELECT pg_sleep(3)")
        assert storage_fault(raised.value) == "database statement timed out"
