"""The shared database file at rest: owner-only whatever the umask, and never an empty file taken
for a new store (which would forget every task, audit event and revocation)."""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from aml_mcp.store.sqlite import DatabaseFileError, SqliteDatabase, check_database_file
from tests.support.damaged_files import replace_header, scramble_middle, truncate_to_zero


@pytest.fixture
def umask_022() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def used(path: Path, rows: int = 10) -> None:
    db = SqliteDatabase(path)
    db.open()

    async def fill() -> None:
        await db.migrate("t", ["CREATE TABLE t (v TEXT)"])
        await db.write(lambda c: c.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * rows))

    anyio.run(fill)
    db.close()


@pytest.mark.usefixtures("umask_022")
def test_a_new_database_and_its_wal_and_shm_are_owner_only(tmp_path: Path) -> None:
    db = SqliteDatabase(tmp_path / "fresh" / "aml-mcp.db")
    db.open()
    try:
        anyio.run(db.migrate, "t", ["CREATE TABLE t (v TEXT)"])
        files = sorted((tmp_path / "fresh").iterdir())
        assert [p.name for p in files] == ["aml-mcp.db", "aml-mcp.db-shm", "aml-mcp.db-wal"]
        assert all(mode(p) == 0o600 for p in files), {p.name: oct(mode(p)) for p in files}
        assert mode(tmp_path / "fresh") == 0o700
    finally:
        db.close()


@pytest.mark.usefixtures("umask_022")
def test_an_existing_world_readable_database_is_tightened_on_open(tmp_path: Path) -> None:
    path = tmp_path / "aml-mcp.db"
    used(path)
    path.chmod(0o644)
    db = SqliteDatabase(path)
    db.open()
    try:
        assert mode(path) == 0o600
        assert db.read_now(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 10
    finally:
        db.close()


def test_an_empty_database_file_is_refused_and_left_as_found(tmp_path: Path) -> None:
    path = tmp_path / "aml-mcp.db"
    used(path)
    truncate_to_zero(path)
    with pytest.raises(
        DatabaseFileError, match=r"aml-mcp\.db is empty \(0 bytes\).*restore it from a backup"
    ):
        SqliteDatabase(path).open()
    assert path.stat().st_size == 0


def test_a_foreign_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "aml-mcp.db"
    used(path)
    replace_header(path)
    with pytest.raises(DatabaseFileError, match="is not a SQLite database"):
        SqliteDatabase(path).open()


def test_the_thorough_check_finds_damaged_pages(tmp_path: Path) -> None:
    path = tmp_path / "aml-mcp.db"
    used(path, rows=400)
    check_database_file(path, thorough=True)  # sound
    scramble_middle(path)
    with pytest.raises(DatabaseFileError, match="is damaged") as refused:
        check_database_file(path, thorough=True)
    assert "\n" not in str(refused.value)


def test_processes_creating_the_same_store_at_once_share_one_file(tmp_path: Path) -> None:
    path = tmp_path / "aml-mcp.db"
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def first_start() -> None:
        db = SqliteDatabase(path)
        barrier.wait()
        try:
            db.open()
            db.close()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_start) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    # No temporary file left behind. (SQLite's own -wal/-shm may outlive connections that closed at
    # the same moment, each seeing the other still open: they belong to the database, not to us.)
    names = {p.name for p in tmp_path.iterdir()}
    assert "aml-mcp.db" in names and names <= {"aml-mcp.db", "aml-mcp.db-wal", "aml-mcp.db-shm"}, names
