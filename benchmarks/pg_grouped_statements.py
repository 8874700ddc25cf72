"""A group of statements as one transaction on PostgreSQL: the store's way against psycopg's
`transaction()` inside a pipeline, in one run, interleaved.

    .venv/bin/python benchmarks/pg_grouped_statements.py [--groups 2000] [--size 4] [--rounds 3]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

`PostgresDatabase.execute_together` sends a group of creates or outcomes as one pipeline whose one
Sync ends an implicit transaction: one round trip. With `transaction()` inside the pipeline psycopg
syncs after `BEGIN` and again before `COMMIT`: three. Each round times `--groups` groups of `--size`
inserts each way, alternately, on one connection of a schema of its own (dropped at the end), and
prints wall time and this process's CPU per group, then the medians of the ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
INSERT = "INSERT INTO grouped (id) VALUES (%s)"


async def as_store_sends(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> None:
    async with conn.pipeline():
        for n in ids:
            await conn.execute(INSERT, (n,))


async def with_transaction(conn: psycopg.AsyncConnection[Any], ids: list[int]) -> None:
    async with conn.pipeline(), conn.transaction():
        for n in ids:
            await conn.execute(INSERT, (n,))


async def timed(
    way: Callable[[psycopg.AsyncConnection[Any], list[int]], Awaitable[None]],
    conn: psycopg.AsyncConnection[Any],
    groups: int,
    size: int,
) -> tuple[float, float]:
    """Wall and CPU milliseconds per group."""
    wall, cpu = time.perf_counter(), time.process_time()
    for g in range(groups):
        await way(conn, list(range(g * size, (g + 1) * size)))
    return (
        1000 * (time.perf_counter() - wall) / groups,
        1000 * (time.process_time() - cpu) / groups,
    )


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--groups", type=int, default=2000)
    parser.add_argument("--size", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--database-url", default=os.environ.get("AML_MCP_TEST_DATABASE_URL", DEFAULT_URL))
    args = parser.parse_args()
    schema = f"grouped_{secrets.token_hex(6)}"
    conn = await psycopg.AsyncConnection.connect(args.database_url, autocommit=True)
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")  # a name made here: a-z, 0-9, _
        await conn.execute(f"SET search_path TO {schema}")
        await conn.execute("CREATE TABLE grouped (id BIGINT)")
        await timed(as_store_sends, conn, 100, args.size)  # warm: statements prepared, caches filled
        await timed(with_transaction, conn, 100, args.size)
        wall_ratios, cpu_ratios = [], []
        for round_ in range(args.rounds):
            ways = [("one Sync", as_store_sends), ("transaction()", with_transaction)]
            if round_ % 2:
                ways.reverse()
            figures = {}
            for name, way in ways:
                figures[name] = await timed(way, conn, args.groups, args.size)
                wall, cpu = figures[name]
                print(
                    f"round {round_ + 1} {name:<14} {wall:.3f} ms wall  {cpu:.3f} ms CPU per group",
                    flush=True,
                )
            wall_ratios.append(figures["one Sync"][0] / figures["transaction()"][0])
            cpu_ratios.append(figures["one Sync"][1] / figures["transaction()"][1])
        print(
            f"one Sync / transaction(), groups of {args.size}: wall {statistics.median(wall_ratios):.2f}x"
            f" [{min(wall_ratios):.2f}-{max(wall_ratios):.2f}],"
            f" CPU {statistics.median(cpu_ratios):.2f}x [{min(cpu_ratios):.2f}-{max(cpu_ratios):.2f}]"
        )
    finally:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main())
