"""The revocation refresh has its own worker thread: a revocation takes effect on time even while
every thread of the shared pool is busy (slow searches, slow client metadata documents, ...)."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio
import anyio.to_thread
import pytest

from aml_mcp.auth.revocation import RevocationList
from aml_mcp.auth.storage.sqlite import REVOCATION_COMPONENT, REVOCATION_MIGRATIONS, SqliteRevocationStore
from aml_mcp.principal import Principal
from aml_mcp.store.sqlite import SqliteDatabase

BOB = Principal(
    issuer="https://id.example", subject="bob", tenant="bank-b", client_id="c", scopes=frozenset()
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_refresh_is_not_queued_behind_a_saturated_shared_pool(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path / "aml-mcp.db")
    database.open()
    release = threading.Event()
    try:
        await database.migrate(REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)
        watcher = RevocationList(SqliteRevocationStore(database))
        await watcher.refresh()
        writer = RevocationList(
            SqliteRevocationStore(database)
        )  # another process's `aml-mcp revoke`, as far as `watcher` knows
        await writer.revoke_subject(BOB.issuer, BOB.subject)
        assert watcher.check(BOB) is None

        shared = anyio.to_thread.current_default_thread_limiter()
        async with anyio.create_task_group() as group:
            for _ in range(int(shared.total_tokens)):
                group.start_soon(anyio.to_thread.run_sync, release.wait)
            try:
                await anyio.sleep(0.2)
                assert shared.borrowed_tokens == shared.total_tokens  # every shared thread is held
                with anyio.fail_after(5):
                    await watcher.refresh()
                assert watcher.check(BOB) == "revoked_subject"
            finally:
                release.set()  # (the held threads end either way, so a failure is reported, not hung)
    finally:
        release.set()
        database.close()
