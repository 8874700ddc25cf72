"""The shared PostgreSQL database for one command's run, when the settings name one.

An operator's command (`revoke`, `audit tail`, ...) on a scaled-out deployment must act on what
the replicas share, not on a data directory no replica reads: with `database_url` set, the command
works on that database and schema, brought up to date first, with a pool of one or two
connections (a command is not a server).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence

from aml_mcp.config import Settings
from aml_mcp.store.postgres import PoolBudget, PostgresDatabase
from aml_mcp.store.sqlite import Migration


@contextlib.asynccontextmanager
async def shared_database(
    settings: Settings, migrations: Sequence[Migration]
) -> AsyncIterator[PostgresDatabase | None]:
    """The settings' PostgreSQL database, open and migrated, for the block; None without one."""
    if settings.database_url is None:
        yield None
        return
    database = PostgresDatabase(
        settings.database_url, schema=settings.database_schema, budget=PoolBudget(min_size=1, max_size=2)
    )
    await database.open()
    try:
        for migration in migrations:
            await database.apply(migration)
        yield database
    finally:
        await database.close()
