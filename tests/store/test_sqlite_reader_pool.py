"""Read connections are pooled, not tied to threads: short-lived threads leave no files open."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aml_mcp.store.sqlite import SqliteDatabase

WAVES = 20
THREADS_PER_WAVE = 16
PEAK_FDS = 2 * (THREADS_PER_WAVE + 1)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def database(tmp_path: Path) -> Iterator[SqliteDatabase]:
    db = SqliteDatabase(tmp_path / "aml-mcp.db")
    db.open()

    async def seed() -> None:
        await db.migrate("t", ["CREATE TABLE t (v INTEGER)"])
        await db.write(lambda c: c.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(100)]))

    anyio.run(seed)
    yield db
    db.close()


def count_rows(db: SqliteDatabase) -> int:
    return int(db.read_now(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]))


def test_bursts_of_short_lived_reader_threads_do_not_grow_open_files(database: SqliteDatabase) -> None:
    assert count_rows(database) == 100
    before = open_fds()
    for _ in range(WAVES):
        # Every thread of a wave reads at the same moment, so each needs a connection of its own.
        barrier = threading.Barrier(THREADS_PER_WAVE)
        results: list[int] = []

        def reader(barrier: threading.Barrier = barrier, results: list[int] = results) -> None:
            barrier.wait()
            results.append(count_rows(database))

        threads = [threading.Thread(target=reader) for _ in range(THREADS_PER_WAVE)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert results == [100] * THREADS_PER_WAVE
    grown = open_fds() - before
    # A connection holds the database and its WAL open. What stays open is bounded by the most
    # reads ever run at once (SQLite parks a closed connection's descriptor for reuse while others
    # hold locks on the file), never by how many threads ever read: one connection per thread
    # would leave 2 x 320 descriptors behind.
    assert grown <= PEAK_FDS, grown


def test_worker_thread_reads_after_retirement_reuse_pooled_connections(database: SqliteDatabase) -> None:
    async def burst() -> None:
        async with anyio.create_task_group() as group:
            for _ in range(THREADS_PER_WAVE):
                group.start_soon(database.read, lambda c: c.execute("SELECT count(*) FROM t").fetchone())

    anyio.run(burst)  # each anyio.run has its own worker threads, which end with it
    before = open_fds()
    for _ in range(WAVES):
        anyio.run(burst)
    assert open_fds() - before <= PEAK_FDS


def test_close_closes_every_pooled_connection(tmp_path: Path) -> None:
    before = open_fds()
    db = SqliteDatabase(tmp_path / "x.db")
    db.open()
    anyio.run(db.migrate, "t", ["CREATE TABLE t (v INTEGER)"])
    threads = [threading.Thread(target=count_rows, args=(db,)) for _ in range(THREADS_PER_WAVE)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    db.close()
    assert open_fds() == before
