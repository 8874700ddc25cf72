"""Real storage faults under a running task runner, and runners on tools a test writes itself.

The faults are SQLite's own, produced on a real file, never mocks of the store:

- `held_write_lock`: another connection holds the write lock (`BEGIN IMMEDIATE`) while the
  server's writer waits only `busy_ms` for it (`short_busy_timeout`): every write fails with
  `SQLITE_BUSY` ("database is locked"), reads go on (WAL), exactly what a lock held past the
  busy timeout does in production.
- `disk_full`: `PRAGMA max_page_count` caps the database at its current size, so any write that
  needs a new page fails with `SQLITE_FULL` ("database or disk is full").
- `FsizeLimitedServer`: the real `aml-mcp` in a child process whose `RLIMIT_FSIZE` the test lowers
  to 0 and back (`prlimit`): every write to a regular file fails as on a full disk, for the whole
  process, and its stderr is drained so logging never blocks it.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.principal import Owner, Principal
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.tasks.clock import SystemClock
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.runner import TaskRunner
from aml_mcp.tasks.service import TaskService
from aml_mcp.tasks.settings import TaskSettings
from aml_mcp.tasks.storage.sqlite import COMPONENT, MIGRATIONS, SqliteTaskStore
from tests.support.subprocess_server import listening_port

DEFAULT_BUSY_MS = 30_000


async def short_busy_timeout(database: SqliteDatabase, busy_ms: int) -> None:
    """Make the database's writer connection give up waiting for a lock after `busy_ms`."""
    await database.write(lambda conn: conn.execute(f"PRAGMA busy_timeout = {int(busy_ms)}"))


@contextlib.contextmanager
def held_write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holds the database's write lock until the block ends."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield conn
        conn.execute("ROLLBACK")
    finally:
        conn.close()


@contextlib.asynccontextmanager
async def disk_full(database: SqliteDatabase) -> AsyncIterator[None]:
    """No page may be added to the database until the block ends (then the limit is lifted)."""
    await database.write(lambda conn: conn.execute("PRAGMA max_page_count = 1"))
    try:
        yield
    finally:
        await database.write(lambda conn: conn.execute("PRAGMA max_page_count = 4294967294"))


@dataclass
class Runner:
    database: SqliteDatabase
    store: SqliteTaskStore
    runner: TaskRunner
    service: TaskService
    tools: ToolRegistry
    settings: TaskSettings

    async def start(
        self,
        tool: str,
        principal: Principal,
        arguments: dict[str, Any] | None = None,
        *,
        answers: dict[str, Any] | None = None,
    ) -> TaskRecord:
        spec = self.tools.get(tool)
        assert spec is not None
        return (
            await self.service.create(
                spec,
                arguments or {},
                principal=principal,
                client_capabilities={"elicitation": {}},
                answers=answers or {},
            )
        ).task

    async def row(self, task: TaskRecord) -> TaskRecord:
        """The task as stored now, read on a connection of its own (works while the writer is locked)."""
        found = await self.store.find(task.task_id, task.owner, SystemClock().now_ms())
        assert found is not None
        return found


def open_database(path: Path) -> SqliteDatabase:
    database = SqliteDatabase(path)
    database.open()
    return database


@contextlib.asynccontextmanager
async def runner_on(
    path: Path,
    tools: ToolRegistry,
    settings: TaskSettings,
    *,
    holder: str | None = None,
    database: SqliteDatabase | None = None,
) -> AsyncIterator[Runner]:
    """A running task runner and service on the database at `path` (again on the same path: a restart)."""
    own = database is None
    database = database or open_database(path)
    try:
        await database.migrate(COMPONENT, MIGRATIONS)
        store = SqliteTaskStore(database)
        clock = SystemClock()
        runner = TaskRunner(store, tools, settings, clock, holder=holder)
        service = TaskService(store, runner, settings, clock)
        async with runner.running():
            yield Runner(database, store, runner, service, tools, settings)
    finally:
        if own:
            database.close()


def owner_of(subject: str, tenant: str, client_id: str = "client-1") -> Owner:
    return Owner(issuer="https://issuer.example", subject=subject, tenant=tenant, client_id=client_id)


def principal_of(who: Owner) -> Principal:
    return Principal(issuer=who.issuer, subject=who.subject, tenant=who.tenant, client_id=who.client_id)


class FsizeLimitedServer:
    """`aml-mcp <args>` in a child process; `full_disk()` makes every file write of it fail."""

    def __init__(self, args: Sequence[str], *, env: dict[str, str] | None = None) -> None:
        self.port = 0  # the child binds port 0; found once it listens
        self.args = [sys.executable, "-m", "aml_mcp", *args, "--port", "0"]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: list[str] = []
        self._drain: threading.Thread | None = None

    def __enter__(self) -> FsizeLimitedServer:
        # stderr is a pipe (a file limit never applies to it) drained all the time.
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        self._drain = threading.Thread(target=self._read_log, daemon=True)
        self._drain.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited early:\n" + self.log())
            self.port = self.port or listening_port(self.proc.pid)
            try:
                if self.port and httpx.get(f"{self.url}/healthz", timeout=0.5).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.05)
        self.__exit__(None, None, None)
        raise RuntimeError("server did not become healthy")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self._log.append(line.decode(errors="replace"))

    def log(self) -> str:
        return "".join(self._log)

    @contextlib.contextmanager
    def full_disk(self) -> Iterator[None]:
        """Until the block ends, any write of the server to a regular file fails (EFBIG)."""
        assert self.proc is not None
        resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, (0, resource.RLIM_INFINITY))
        try:
            yield
        finally:
            limit = (resource.RLIM_INFINITY, resource.RLIM_INFINITY)
            resource.prlimit(self.proc.pid, resource.RLIMIT_FSIZE, limit)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self._drain is not None:
            self._drain.join(timeout=5)
