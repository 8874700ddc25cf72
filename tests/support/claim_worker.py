"""A separate process that claims tasks until none are left: `python -m tests.support.claim_worker
URL SCHEMA HOLDER NOW_MS`. It waits for a `go` line on stdin (so several start together), then
prints the ids it claimed as one JSON list."""

from __future__ import annotations

import asyncio
import json
import sys

from aml_mcp.store.postgres import PoolBudget, PostgresDatabase
from aml_mcp.tasks.storage.postgres import PostgresTaskStore

BATCH = 5


async def main(url: str, schema: str, holder: str, now_ms: int) -> None:
    database = PostgresDatabase(url, schema=schema, budget=PoolBudget(min_size=1, max_size=2))
    await database.open()
    try:
        store = PostgresTaskStore(database)
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        if sys.stdin.readline().strip() != "go":
            return
        claimed: list[str] = []
        while batch := await store.claim(holder, now_ms, now_ms + 600_000, BATCH):
            assert len(batch) <= BATCH, "a claim took more than its limit"
            claimed.extend(task.task_id for task in batch)
        sys.stdout.write(json.dumps(claimed) + "\n")
    finally:
        await database.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
