"""A PostgreSQL schema of its own for each test, on the server `AML_MCP_TEST_DATABASE_URL` names.

Tests on the shared server never see each other's tables: each gets `CREATE SCHEMA t_<random>`
(every connection of its `PostgresDatabase` has that `search_path`), dropped afterwards. An
unreachable server fails the test with a message saying what to start; it never skips.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.subscriptions.postgres_bus import listener_name

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def database_url() -> str:
    return os.environ.get("AML_MCP_TEST_DATABASE_URL", DEFAULT_URL)


def unreachable_message(url: str, exc: BaseException) -> str:
    return (
        f"PostgreSQL is unreachable at {url} ({exc}). The PostgreSQL tests need a server: start one "
        "(trust auth, a database `test`) or point AML_MCP_TEST_DATABASE_URL at one."
    )


def check_reachable(url: str) -> None:
    """Fail (never skip) the calling test when the server does not answer."""
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError as exc:
        pytest.fail(unreachable_message(url, exc), pytrace=False)


def new_schema_name() -> str:
    return f"t_{secrets.token_hex(8)}"


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextlib.contextmanager
def scratch_schema() -> Iterator[tuple[str, str]]:
    """(url, schema): a fresh schema, dropped on exit (its tables with it)."""
    url = database_url()
    check_reachable(url)
    schema = new_schema_name()
    try:
        yield url, schema
    finally:
        drop_schema(url, schema)


@contextlib.asynccontextmanager
async def scratch_database() -> AsyncIterator[PostgresDatabase]:
    """An open `PostgresDatabase` on a fresh schema, closed and dropped on exit."""
    with scratch_schema() as (url, schema):
        database = PostgresDatabase(url, schema=schema)
        await database.open()
        try:
            yield database
        finally:
            await database.close()


BACKENDS = ("sqlite", "postgres")
"""What a server's shared state lives on, for suites that run once per backend."""


@contextlib.contextmanager
def backend_settings(backend: str) -> Iterator[dict[str, Any]]:
    """Settings overrides that put a server's shared state on `backend`, each PostgreSQL server in a
    schema of its own (dropped on exit)."""
    if backend == "sqlite":
        yield {}
        return
    with scratch_schema() as (url, schema):
        yield {"database_url": url, "database_schema": schema}


def kill_listeners(url: str, schema: str, rounds: int, every: float, killed: list[int]) -> None:
    """`pg_terminate_backend` on every listener connection of this schema, `rounds` times."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(rounds):
            time.sleep(every)
            row = conn.execute(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = %s",
                (listener_name(schema),),
            ).fetchone()
            killed.append(int(row[0]) if row else 0)
