"""`store.faults.storage_fault` on real exceptions from every backend: what each driver and store
raises when its database fails is a storage fault with a short cause; a bug (bad SQL, a constraint, a
plain `ValueError`) is not. The PostgreSQL faults are made on a server of the test's own."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from mcp.shared.exceptions import MCPError
from psycopg_pool import ConnectionPool

from aml_mcp.aml.notes.model import NotesUnavailableError
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.store.faults import StorageFault, storage_fault
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.tasks.storage import StorageUnavailable
from tests.support.private_postgres import PrivatePostgres


def raised(action: object) -> BaseException:
    try:
        action()  # type: ignore[operator]
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


def wrapped(inner: BaseException, outer: BaseException) -> BaseException:
    """`outer` raised from `inner`, as a store or a tool wraps what it meets."""
    try:
        raise outer from inner
    except BaseException as exc:
        return exc


def raised_while_handling(inner: BaseException, outer: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is the point
    except BaseException as exc:
        return exc


# -- PostgreSQL ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as server:
        yield server


@pytest.mark.faults
def test_a_terminated_postgres_connection_is_a_fault_and_bad_sql_is_not(pg: PrivatePostgres) -> None:
    conn = psycopg.connect(pg.url, autocommit=True, application_name="aml-mcp-classifier")
    try:
        syntax = raised(lambda: conn.execute("SELEC 1"))
        conn.execute("CREATE TEMPORARY TABLE t (id INT PRIMARY KEY)")
        conn.execute("INSERT INTO t VALUES (1)")
        duplicate = raised(lambda: conn.execute("INSERT INTO t VALUES (1)"))
        assert pg.terminate_all("aml-mcp-classifier") == 1
        terminated = raised(lambda: conn.execute("SELECT 1"))
        after = raised(lambda: conn.execute("SELECT 1"))
    finally:
        conn.close()
    assert isinstance(terminated, psycopg.OperationalError)
    assert storage_fault(terminated) == "database unreachable"
    assert storage_fault(after) is not None  # the connection is closed now
    assert storage_fault(syntax) is None and storage_fault(duplicate) is None
    # A tool's own error raised from (or while handling) the lost connection is that connection's fault.
    assert storage_fault(wrapped(terminated, RuntimeError("draft failed"))) == "database unreachable"
    assert storage_fault(raised_while_handling(terminated, KeyError("x"))) == "database unreachable"
    assert storage_fault(wrapped(syntax, RuntimeError("draft failed"))) is None


@pytest.mark.faults
def test_a_stopped_server_and_an_exhausted_pool_are_faults(pg: PrivatePostgres) -> None:
    with (
        ConnectionPool(pg.url, min_size=1, max_size=1, timeout=0.2, open=True) as pool,
        pool.connection(),
    ):
        exhausted = raised(lambda: pool.getconn())
    assert storage_fault(exhausted) == "no database connection free"
    pg.stop()
    try:
        refused = raised(lambda: psycopg.connect(pg.url, connect_timeout=2))
    finally:
        pg.start()
    assert storage_fault(refused) == "database unreachable"


@pytest.mark.faults
def test_the_notes_store_outage_error_is_a_fault(pg: PrivatePostgres) -> None:
    with PostgresNotes(PostgresDatabase(pg.url, schema="classifier_notes")) as notes:
        assert notes.probe() is None
        pg.terminate_all()
        outage = raised(lambda: notes.tenant("meridian-bank").case_notes("MRD-C000001"))
    assert isinstance(outage, NotesUnavailableError) and isinstance(outage, StorageFault)
    assert storage_fault(outage) == "database unreachable"
    assert storage_fault(wrapped(outage, RuntimeError("draft failed"))) == "database unreachable"


# -- SQLite --------------------------------------------------------------------------------------------


def test_sqlite_faults_are_faults_and_its_bugs_are_not(tmp_path: Path) -> None:
    path = tmp_path / "db.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    writer = sqlite3.connect(path, timeout=0, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    locked = raised(lambda: writer.execute("INSERT INTO t VALUES (1)"))
    holder.execute("ROLLBACK")
    writer.execute("INSERT INTO t VALUES (1)")
    duplicate = raised(lambda: writer.execute("INSERT INTO t VALUES (1)"))
    syntax = raised(lambda: writer.execute("SELEC 1"))
    writer.close()
    closed = raised(lambda: writer.execute("SELECT 1"))
    holder.close()
    read_only = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    refused_write = raised(lambda: read_only.execute("INSERT INTO t VALUES (2)"))
    read_only.close()
    unopenable = raised(lambda: sqlite3.connect(tmp_path / "missing" / "db.sqlite"))
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database " * 100)
    damaged = raised(lambda: sqlite3.connect(garbage).execute("SELECT * FROM sqlite_master"))

    assert storage_fault(locked) == "database busy"
    assert storage_fault(refused_write) == "database read-only"
    assert storage_fault(unopenable) == "database cannot be opened"
    assert storage_fault(damaged) == "database damaged"
    assert storage_fault(closed) == "database closed"
    assert storage_fault(duplicate) is None and storage_fault(syntax) is None
    assert storage_fault(wrapped(locked, RuntimeError("draft failed"))) == "database busy"


# -- the stores' own errors and what is never a fault --------------------------------------------------


def test_the_stores_unavailable_errors_are_faults_and_a_tools_errors_are_not() -> None:
    locked = sqlite3.OperationalError("database is locked")
    locked.sqlite_errorname = "SQLITE_BUSY"  # type: ignore[attr-defined]
    assert storage_fault(wrapped(locked, StorageUnavailable("database busy"))) == "database busy"
    assert storage_fault(StorageUnavailable("disk full")) == "disk full"  # a StorageFault of its own
    group = BaseExceptionGroup("a task group's", [ValueError("x"), StorageUnavailable("disk full")])
    assert storage_fault(group) == "disk full"
    assert storage_fault(RuntimeError("database is not open")) == "database closed"
    for bug in (ValueError("bad"), RuntimeError("boom"), MCPError(code=-32602, message="bad params")):
        assert storage_fault(bug) is None
