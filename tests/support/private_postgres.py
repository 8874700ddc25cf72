"""A PostgreSQL server of the test's own, for tests that break the database on purpose.

The shared server the other PostgreSQL tests use (`tests/support/postgres.py`) carries other jobs'
schemas and connections: a test that terminates every connection, or stops the server for a
while, must not do that to them. `PrivatePostgres` runs Debian's own binaries
(`/usr/lib/postgresql/<version>/bin`): `initdb` in a temporary directory, `pg_ctl` on a free port of
127.0.0.1 (no Unix socket), trust authentication for the `postgres` user, durability off (it is
thrown away). The binaries refuse to run as root, so as root they run as the `postgres` user
(`runuser -u postgres --`) on a directory handed to that user.

    with PrivatePostgres() as pg:              # or the module-scoped `private_postgres` fixture
        settings = {"database_url": pg.url, "database_schema": "t_x"}
        pg.terminate_all()                     # every aml-mcp connection dropped, server stays up
        pg.stop(); pg.start()                  # a fast shutdown and a restart on the same port

A missing binary fails the test with what to install; it never skips. On exit the server is
stopped (immediately) and its directory deleted.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import psycopg
import pytest

BIN_GLOB = "/usr/lib/postgresql/*/bin"
START_SECONDS = 60.0
"""How long a start may take before the test fails: generous, the CI machine has 2 shared cores."""
SERVER_OPTIONS = (
    # Thrown away after the module: no durability work, a small footprint.
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "shared_buffers=32MB",
    "max_connections=120",
    "listen_addresses=127.0.0.1",
    "unix_socket_directories=",
    "log_min_messages=warning",
)


def _binaries() -> Path:
    """The newest Debian PostgreSQL `bin` directory (or `AML_MCP_TEST_PG_BIN`); fails the test with
    what to install when there is none."""
    chosen = os.environ.get("AML_MCP_TEST_PG_BIN")
    candidates = [Path(chosen)] if chosen else sorted(Path("/").glob(BIN_GLOB.lstrip("/")), key=_version)
    for directory in reversed(candidates):
        if all((directory / name).exists() for name in ("initdb", "pg_ctl", "pg_isready")):
            return directory
    pytest.fail(
        "the fault tests start a PostgreSQL server of their own and need Debian's server binaries "
        f"(initdb, pg_ctl, pg_isready in {chosen or BIN_GLOB}): install them with "
        "`apt-get install postgresql`, or point AML_MCP_TEST_PG_BIN at such a directory",
        pytrace=False,
    )


def _version(directory: Path) -> tuple[int, ...]:
    name = directory.parent.name
    return tuple(int(part) for part in name.split(".") if part.isdigit())


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivatePostgres:
    """One throw-away PostgreSQL server; a context manager (see the module docstring)."""

    def __init__(self, *, user: str = "postgres") -> None:
        self.user = user
        self.bin = _binaries()
        self.port = 0
        self.directory: Path | None = None
        self._as_user: list[str] = []

    # -- what a test uses -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's `postgres` database (tests keep apart in schemas of their own)."""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    @property
    def log_path(self) -> Path:
        assert self.directory is not None
        return self.directory / "server.log"

    def log(self) -> str:
        """The server's log so far (for a failing test's message)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def connect(self) -> psycopg.Connection[Any]:
        """An administrative connection (autocommit), named so `terminate_all` never ends it."""
        return psycopg.connect(self.url, autocommit=True, connect_timeout=5, application_name="fault-harness")

    def terminate_all(self, application_name_like: str = "aml-mcp%") -> int:
        """`pg_terminate_backend` on every connection whose application name is LIKE the pattern
        (every aml-mcp pool, listener and audit connection by default); how many there were."""
        with self.connect() as conn:
            row = conn.execute(
                "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE application_name LIKE %s AND pid <> pg_backend_pid()",
                (application_name_like,),
            ).fetchone()
        return int(row[0]) if row else 0

    def connections(self, application_name_like: str = "aml-mcp%") -> list[int]:
        """The backend pids of the connections whose application name is LIKE the pattern."""
        with self.connect() as conn:
            rows = conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s AND pid <> pg_backend_pid()"
                " ORDER BY pid",
                (application_name_like,),
            ).fetchall()
        return [int(row[0]) for row in rows]

    def sessions(self) -> int:
        """Sessions ever opened on the `postgres` database (`pg_stat_database.sessions`): a new
        connection in place of a discarded one shows here, whoever made it."""
        with self.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()
        return int(row[0]) if row else 0

    def stop(self, mode: str = "fast") -> None:
        """Shut the server down (`fast`: every session ended, a clean shutdown) and wait for it."""
        self._pg_ctl("stop", "-m", mode, "-w", "-t", str(int(START_SECONDS)))

    def start(self) -> None:
        """Start the server on its port and wait until it accepts connections."""
        options = " ".join(f"-c {option}" for option in (f"port={self.port}", *SERVER_OPTIONS))
        self._pg_ctl("start", "-w", "-t", str(int(START_SECONDS)), "-l", str(self.log_path), "-o", options)
        self._wait_ready()

    def restart(self) -> None:
        self.stop()
        self.start()

    # -- lifetime ---------------------------------------------------------------------------------

    def __enter__(self) -> PrivatePostgres:
        self.directory = Path(tempfile.mkdtemp(prefix="aml-mcp-pg-"))
        try:
            self._as_user = self._user_prefix()
            data = self.directory / "data"
            initdb = [str(self.bin / "initdb"), "-D", str(data), "-U", self.user, "-A", "trust"]
            self._run([*initdb, "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions"])
            for attempt in range(3):
                self.port = _free_port()
                try:
                    self.start()
                    break
                except AssertionError:
                    if attempt == 2:  # the port was taken between choosing and binding it, 3 times
                        raise
        except BaseException:
            self._remove()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._remove()

    def _remove(self) -> None:
        if self.directory is None:
            return
        if (self.directory / "data" / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except AssertionError:
                self._kill_postmaster()
        shutil.rmtree(self.directory, ignore_errors=True)
        self.directory = None

    def _kill_postmaster(self) -> None:
        assert self.directory is not None
        with contextlib.suppress(OSError, ValueError, IndexError):
            pid = int((self.directory / "data" / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, signal.SIGQUIT)

    # -- running the binaries ---------------------------------------------------------------------

    def _user_prefix(self) -> list[str]:
        """As root, the binaries run as the `postgres` user (they refuse root), on a directory it owns."""
        if os.geteuid() != 0:
            return []
        assert self.directory is not None
        runuser = shutil.which("runuser")
        try:
            shutil.chown(self.directory, user="postgres")
        except (LookupError, OSError) as exc:
            pytest.fail(
                f"running as root, the fault tests start PostgreSQL as the `postgres` user, which is "
                f"missing or cannot own {self.directory} ({exc}): install Debian's postgresql package",
                pytrace=False,
            )
        if runuser is None:
            pytest.fail("running as root, the fault tests need `runuser` (util-linux)", pytrace=False)
        return [runuser, "-u", "postgres", "--"]

    def _pg_ctl(self, *args: str) -> None:
        assert self.directory is not None
        self._run([str(self.bin / "pg_ctl"), "-D", str(self.directory / "data"), *args])

    def _run(self, command: list[str]) -> None:
        done = subprocess.run(
            [*self._as_user, *command],
            capture_output=True,
            text=True,
            timeout=START_SECONDS + 30,
            check=False,
            cwd=self.directory,
        )
        if done.returncode != 0:
            raise AssertionError(
                f"{Path(command[0]).name} {' '.join(command[1:3])} failed ({done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}\n{self.log()[-2000:]}"
            )

    def _wait_ready(self) -> None:
        """`pg_isready` until the server answers on its TCP port (pg_ctl's own wait reads a file)."""
        deadline = time.monotonic() + START_SECONDS
        ready = [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port), "-t", "2"]
        while subprocess.run(ready, check=False, timeout=10).returncode != 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"PostgreSQL did not accept connections within {START_SECONDS:g} s")
            time.sleep(0.05)
