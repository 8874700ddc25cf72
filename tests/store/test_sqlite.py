"""The shared SQLite handle: group commit, savepoint isolation, migrations."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import pytest

from aml_mcp.store.sqlite import SqliteDatabase

pytestmark = pytest.mark.anyio

STEPS = [
    "CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT NOT NULL UNIQUE);"
    "CREATE TABLE log (v TEXT);"
    "CREATE TRIGGER t_log AFTER INSERT ON t BEGIN INSERT INTO log VALUES (new.v); END;",
    "ALTER TABLE t ADD COLUMN extra TEXT",
]


@pytest.fixture
async def db(tmp_path: Path):  # type: ignore[no-untyped-def]
    database = SqliteDatabase(tmp_path / "test.db")
    database.open()
    await database.migrate("test", STEPS)
    yield database
    database.close()


async def test_migrations_apply_once_and_record_versions(db: SqliteDatabase) -> None:
    assert await db.migrate("test", STEPS) == 2
    rows = await db.read(
        lambda c: c.execute("SELECT version FROM schema_migrations WHERE component='test'").fetchall()
    )
    assert [r[0] for r in rows] == [1, 2]


async def test_concurrent_writes_all_commit_and_trigger_runs(db: SqliteDatabase) -> None:
    async def insert(i: int) -> None:
        await db.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", (f"v{i}",)))

    async with anyio.create_task_group() as tg:
        for i in range(200):
            tg.start_soon(insert, i)
    assert await db.read(lambda c: c.execute("SELECT COUNT(*) FROM t").fetchone()[0]) == 200
    assert await db.read(lambda c: c.execute("SELECT COUNT(*) FROM log").fetchone()[0]) == 200


async def test_a_failing_write_does_not_undo_its_batch_mates(db: SqliteDatabase) -> None:
    await db.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('dup')"))
    results: list[object] = []

    async def attempt(value: str) -> None:
        try:
            await db.write(lambda c: c.execute("INSERT INTO t (v) VALUES (?)", (value,)))
            results.append(value)
        except sqlite3.IntegrityError as exc:
            results.append(exc)

    async with anyio.create_task_group() as tg:
        for value in ("a", "dup", "b"):
            tg.start_soon(attempt, value)
    assert sorted(r for r in results if isinstance(r, str)) == ["a", "b"]
    assert sum(isinstance(r, sqlite3.IntegrityError) for r in results) == 1
    values = await db.read(lambda c: sorted(r[0] for r in c.execute("SELECT v FROM t")))
    assert values == ["a", "b", "dup"]


async def test_committed_data_survives_reopen(tmp_path: Path) -> None:
    database = SqliteDatabase(tmp_path / "d.db")
    database.open()
    await database.migrate("test", STEPS)
    await database.write(lambda c: c.execute("INSERT INTO t (v) VALUES ('kept')"))
    database.close()
    again = SqliteDatabase(tmp_path / "d.db")
    again.open()
    assert again.read_now(lambda c: c.execute("SELECT v FROM t").fetchall()) == [("kept",)]
    again.close()
