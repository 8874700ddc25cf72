"""SQLite for the single-machine deployment: one writer thread with group commit, many readers.

Every write runs on one dedicated thread. Writes that arrive while a transaction is being
committed wait and are committed together in the next one, so one fsync covers many callers:
durability costs one disk flush per batch, not per request. Each write runs in its own
savepoint, so one failing write never takes its batch-mates down with it. Reads borrow a
connection from a small pool for the length of one operation; WAL mode lets them proceed while
the writer commits.

Files at rest: the database and its WAL and shared-memory files are owner-only (0600), whatever
the process umask, because they hold every bank's tasks, SAR drafts and audit trail. SQLite
gives the `-wal` and `-shm` files the mode of the database file, so creating that file 0600
first is enough for a new store; an existing one is tightened on open.

A file that exists but is empty or not SQLite is refused (`DatabaseFileError`) instead of being
taken for a new store: an empty `aml-mcp.db` would silently forget every task, audit event and
revocation, and a revoked token would be accepted again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import secrets
import sqlite3
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import anyio.to_thread

from aml_mcp.store.migrations import Migration

logger = logging.getLogger(__name__)

T = TypeVar("T")
Operation = Callable[[sqlite3.Connection], T]

MAX_BATCH = 256
MAX_IDLE_READERS = 8
"""Read connections kept open between reads; more may be open while more reads run at once.

Reads are short (milliseconds), so a handful of pooled connections serves the worker threads of
a busy server; connections beyond this are closed when their read ends instead of waiting on
their threads (which anyio retires after 10 s idle) and leaking two file descriptors each."""

SQLITE_HEADER = b"SQLite format 3\x00"
PRIVATE_FILE_MODE = 0o600
SIDE_FILE_SUFFIXES = ("-wal", "-shm", "-journal")
"""Files SQLite keeps beside a database; they hold the same data, so they get the same mode."""


class DatabaseFileError(RuntimeError):
    """A database file that exists but cannot be used as it is: empty, not SQLite, or damaged.

    The message names the file and what an operator can do about it, in one line, because the
    command line prints it as the reason the server did not start.
    """


def restrict_to_owner(path: Path) -> None:
    """Make `path` and the files SQLite keeps beside it owner-only, if they exist."""
    for candidate in (path, *(path.with_name(path.name + suffix) for suffix in SIDE_FILE_SUFFIXES)):
        try:
            mode = candidate.stat().st_mode
        except FileNotFoundError:
            continue
        if stat.S_IMODE(mode) & 0o077:
            os.chmod(candidate, stat.S_IMODE(mode) & 0o700)


def prepare_database_file(path: Path) -> None:
    """Before SQLite opens `path`: refuse an empty or foreign file, create a new one owner-only.

    A missing file is a new store: it is made under a temporary name with mode 0600, given its
    SQLite header (WAL mode), and linked into place, so no other process ever sees it empty (an
    empty file is what `check_database_file` refuses). SQLite then creates the WAL and
    shared-memory files with the database file's mode. An existing file must start with the
    SQLite header; it and its side files are tightened to owner-only.
    """
    if not path.exists():
        _create_database_file(path)
    check_database_file(path)
    restrict_to_owner(path)


def _create_database_file(path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()
        with contextlib.suppress(FileExistsError):  # another process created it first: theirs wins
            os.link(tmp, path)
    finally:
        for leftover in (tmp, *(tmp.with_name(tmp.name + suffix) for suffix in SIDE_FILE_SUFFIXES)):
            leftover.unlink(missing_ok=True)


def check_database_file(path: Path, *, thorough: bool = False) -> None:
    """Raise `DatabaseFileError` unless `path` is missing or looks like a sound SQLite database.

    The quick form reads the first bytes only: an empty file (a failed copy, a full disk at the
    wrong moment) or a file that is no SQLite database. `thorough` also runs `PRAGMA quick_check`,
    which reads every page (seconds for gigabytes): for start-up, never on a request's path.
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return
    except OSError as exc:
        raise DatabaseFileError(f"{path} cannot be read ({exc.strerror or exc})") from exc
    if not head:
        raise DatabaseFileError(
            f"{path} is empty (0 bytes), so everything it held is gone: restore it from a backup, "
            "or remove it to start with an empty store"
        )
    if head != SQLITE_HEADER:
        raise DatabaseFileError(f"{path} is not a SQLite database: restore it from a backup")
    if thorough:
        problem = integrity_problem(path)
        if problem is not None:
            raise DatabaseFileError(f"{path} is damaged ({problem}): restore it from a backup")


_DAMAGE_CODES = frozenset({sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB})
_ACCESS_CODES = frozenset({sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM})


def is_damage(exc: BaseException) -> bool:
    """Whether a SQLite error says the file itself is damaged (not locked, full or unwritable)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(exc, sqlite3.DatabaseError) and code is not None and code & 0xFF in _DAMAGE_CODES


def open_failure(path: Path, exc: sqlite3.Error) -> str:
    """One line for an operator: why the database at `path` could not be opened, and what to do."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _ACCESS_CODES:
        return f"{path} cannot be opened for writing ({exc}): is the data directory writable?"
    if is_damage(exc):
        return f"{path} is damaged ({exc}): restore it from a backup"
    return f"{path} cannot be opened ({exc})"


def integrity_problem(path: Path) -> str | None:
    """The first problem `PRAGMA quick_check` finds in the database at `path`, or None."""
    try:
        conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    except sqlite3.Error as exc:
        return str(exc)
    try:
        rows = conn.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.DatabaseError as exc:
        return str(exc)
    finally:
        conn.close()
    first = str(rows[0][0]) if rows else "no answer"
    if first == "ok":
        return None
    # quick_check reports over several lines ("*** in database main ***\nPage 56: ..."): keep one.
    return " ".join(first.replace("*** in database main ***", "").split())


_CAUSES = {
    "SQLITE_FULL": "disk full",
    "SQLITE_BUSY": "database busy",
    "SQLITE_LOCKED": "database busy",
    "SQLITE_READONLY": "database read-only",
    "SQLITE_IOERR": "I/O error",
    "SQLITE_CANTOPEN": "database cannot be opened",
    "SQLITE_CORRUPT": "database damaged",
    "SQLITE_NOTADB": "database damaged",
}


def storage_fault(exc: BaseException) -> str | None:
    """A short cause when `exc` is the storage failing (not the request, not a bug), else `None`.

    The SQLite counterpart of `store.postgres.storage_fault`, so every store on the file tells a
    transient condition from a bug the same way. Judged by SQLite's primary result code: a full
    disk, a lock, a read-only, unopenable or damaged file, an I/O error. A generic `SQLITE_ERROR`
    (bad SQL, no such table) and constraint failures are bugs and stay what they are — unless
    raised while handling a storage failure: a full disk rolls the whole transaction back, and the
    batch's clean-up then fails with "no such savepoint", which is the failure seen, not its cause.
    """
    seen: BaseException | None = exc
    for _ in range(8):
        if seen is None:
            return None
        cause = _own_fault(seen)
        if cause is not None:
            return cause
        seen = seen.__cause__ or seen.__context__
    return None


def _own_fault(exc: BaseException) -> str | None:
    if isinstance(exc, sqlite3.ProgrammingError):
        return "database closed" if "closed" in str(exc) else None
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", None) or ""
        primary = "_".join(name.split("_")[:2])  # SQLITE_IOERR_WRITE -> SQLITE_IOERR
        return _CAUSES.get(primary)
    if isinstance(exc, RuntimeError) and "not open" in str(exc):
        return "database closed"  # written to while the server shuts down
    return None


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
        self._idle: list[sqlite3.Connection] = []
        self._idle_lock = threading.Lock()
        self._retiring = False
        """Set by `close`: a read that ends afterwards closes its connection instead of pooling it."""

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def open(self) -> None:
        """Open the file (creating it, owner-only) and start the writer thread.

        Raises `DatabaseFileError` for an existing file that is empty or not a SQLite database.
        """
        if self._writer is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        prepare_database_file(self.path)
        try:
            writer_conn = self._connect()
        except sqlite3.DatabaseError as exc:
            raise DatabaseFileError(open_failure(self.path, exc)) from exc
        restrict_to_owner(self.path)
        self._retiring = False
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
        with self._idle_lock:
            self._retiring = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

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
                except BaseException as exc:
                    if not conn.in_transaction:
                        # SQLite ended the whole transaction itself (a full disk, an I/O error): no
                        # job of this batch was written, and each gets this cause, not "no savepoint".
                        raise
                    # The caller gets its own failure back; the batch goes on without it.
                    conn.execute("ROLLBACK TO SAVEPOINT job")
                    conn.execute("RELEASE SAVEPOINT job")
                    outcomes.append((None, exc))
                else:
                    conn.execute("RELEASE SAVEPOINT job")
                    outcomes.append((result, None))
            conn.execute("COMMIT")
        except BaseException as exc:
            if isinstance(exc, sqlite3.Error):
                logger.error("database batch of %d write(s) failed: %s", len(batch), exc)
            else:
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

    @contextlib.contextmanager
    def _reader(self) -> Iterator[sqlite3.Connection]:
        """A read-only connection for one operation, from the pool (or new), returned after it.

        Connections belong to the pool, not to threads: a thread that ends leaves nothing open,
        and at most `MAX_IDLE_READERS` stay open between reads.
        """
        if self._writer is None:
            raise RuntimeError("database is not open")
        with self._idle_lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._connect()
            conn.execute("PRAGMA query_only=ON")
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _give_back(self, conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:  # an operation left a read transaction open: end it
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            conn.close()
            return
        with self._idle_lock:
            if not self._retiring and len(self._idle) < MAX_IDLE_READERS:
                self._idle.append(conn)
                return
        conn.close()

    def _run_read(self, operation: Operation[T]) -> T:
        with self._reader() as conn:
            return operation(conn)

    async def read(self, operation: Operation[T], *, limiter: anyio.CapacityLimiter | None = None) -> T:
        """Run `operation` on a read-only connection in a worker thread.

        `limiter` gives a caller its own threads: work that must run on time (the revocation
        refresh) is then never queued behind whatever fills the shared default pool.
        """
        return await anyio.to_thread.run_sync(self._run_read, operation, limiter=limiter)

    def read_now(self, operation: Operation[T]) -> T:
        """Run a read on the calling thread, blocking it for as long as the read takes.

        For start-up code, command-line tools, and point lookups by primary key on the request
        path: those take microseconds, far less than the hop to a worker thread and back.
        """
        return self._run_read(operation)

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
