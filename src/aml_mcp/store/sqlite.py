"""SQLite for the single-machine deployment: one writer thread with group commit, many readers.

Every write runs on one dedicated thread. Writes that arrive while a transaction is being
committed wait and are committed together in the next one, so one fsync covers many callers:
durability costs one disk flush per batch, not per request. Each write runs in its own
savepoint, so one failing write never takes its batch-mates down with it. Reads run on worker
threads with their own connections; WAL mode lets them proceed while the writer commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import anyio.to_thread

logger = logging.getLogger(__name__)

T = TypeVar("T")
Operation = Callable[[sqlite3.Connection], T]

MAX_BATCH = 256


class Migration(NamedTuple):
    """One component's schema: an append-only list of SQL scripts (add a step, never edit one)."""

    component: str
    steps: Sequence[str]


@dataclass(slots=True)
class _Job:
    operation: Operation[Any]
    future: asyncio.Future[Any] | None
    loop: asyncio.AbstractEventLoop | None


_STOP = object()


def _settle(job: _Job, result: Any, error: BaseException | None) -> None:
    future, loop = job.future, job.loop
    if future is None or loop is None:
        if error is not None:
            logger.error("fire-and-forget database write failed", exc_info=error)
        return

    def deliver() -> None:
        if future.cancelled():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
        loop.call_soon_threadsafe(deliver)


class SqliteDatabase:
    """A SQLite database file shared by the server's durable components.

    `synchronous=FULL` in WAL mode makes every commit durable (fsync of the log) before the
    awaiting caller resumes.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._jobs: queue.SimpleQueue[_Job | object] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def open(self) -> None:
        """Open the file (creating it) and start the writer thread."""
        if self._writer is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        writer_conn = self._connect()
        self._writer = threading.Thread(
            target=self._write_loop, args=(writer_conn,), name="sqlite-writer", daemon=True
        )
        self._writer.start()

    def close(self) -> None:
        """Commit what is queued, stop the writer and close every connection."""
        if self._writer is None:
            return
        self._jobs.put(_STOP)
        self._writer.join()
        self._writer = None
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                first = self._jobs.get()
                if first is _STOP:
                    return
                batch: list[_Job] = [first]  # type: ignore[list-item]
                stopping = False
                while len(batch) < MAX_BATCH:
                    try:
                        item = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stopping = True
                        break
                    batch.append(item)  # type: ignore[arg-type]
                self._commit(conn, batch)
                if stopping:
                    return
        finally:
            conn.close()

    def _commit(self, conn: sqlite3.Connection, batch: list[_Job]) -> None:
        outcomes: list[tuple[Any, BaseException | None]] = []
        try:
            conn.execute("BEGIN IMMEDIATE")
            for job in batch:
                conn.execute("SAVEPOINT job")
                try:
                    result = job.operation(conn)
                except BaseException as exc:  # the caller gets its own failure back
                    conn.execute("ROLLBACK TO SAVEPOINT job")
                    conn.execute("RELEASE SAVEPOINT job")
                    outcomes.append((None, exc))
                else:
                    conn.execute("RELEASE SAVEPOINT job")
                    outcomes.append((result, None))
            conn.execute("COMMIT")
        except BaseException as exc:
            logger.exception("database batch commit failed")
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for job in batch:
                _settle(job, None, exc)
            return
        for job, (result, error) in zip(batch, outcomes, strict=True):
            _settle(job, result, error)

    async def write(self, operation: Operation[T]) -> T:
        """Run `operation` in a write transaction; returns once it is durably committed."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put(_Job(operation, future, loop))
        return await future

    def write_soon(self, operation: Operation[Any]) -> None:
        """Queue a write nobody waits for (failures are logged); it joins the next group commit."""
        if self._writer is None:
            raise RuntimeError("database is not open")
        self._jobs.put(_Job(operation, None, None))

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=ON")
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    async def read(self, operation: Operation[T]) -> T:
        """Run `operation` on a read-only connection in a worker thread."""
        return await anyio.to_thread.run_sync(lambda: operation(self._reader()))

    def read_now(self, operation: Operation[T]) -> T:
        """Run a read on the calling thread, blocking it for as long as the read takes.

        For start-up code, command-line tools, and point lookups by primary key on the request
        path: those take microseconds, far less than the hop to a worker thread and back.
        """
        return operation(self._reader())

    async def apply(self, migration: Migration) -> int:
        """`migrate` for a component's `Migration`."""
        return await self.migrate(migration.component, migration.steps)

    async def migrate(self, component: str, steps: Sequence[str]) -> int:
        """Bring `component`'s tables up to date; returns its schema version.

        Each component owns an append-only list of SQL scripts; step N is applied once, in its own
        transaction, and recorded. Components never share a numbering, so they evolve independently.
        """

        def apply(conn: sqlite3.Connection) -> int:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " component TEXT NOT NULL, version INTEGER NOT NULL,"
                " applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')),"
                " PRIMARY KEY (component, version))"
            )
            row = conn.execute(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations WHERE component = ?", (component,)
            ).fetchone()
            current = int(row[0])
            for version, script in enumerate(steps[current:], start=current + 1):
                for statement in _statements(script):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (component, version) VALUES (?, ?)", (component, version)
                )
            return len(steps) if len(steps) > current else current

        return await self.write(apply)

    async def ping(self) -> None:
        """Readiness probe: the file answers a query."""
        await self.read(lambda conn: conn.execute("SELECT 1").fetchone())


def _statements(script: str) -> list[str]:
    """Split a migration script into complete statements (trigger bodies keep their inner semicolons)."""
    statements: list[str] = []
    pending = ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n\t;"):
                statements.append(pending.strip())
            pending = ""
    if pending.strip(" \n\t;"):
        raise ValueError("migration script ends with an incomplete statement")
    return statements
