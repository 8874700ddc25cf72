"""Why a command cannot start, said in one line, and the checks `serve` runs before it claims anything.

An operator who starts `aml-mcp serve` on a read-only disk, a damaged database or a busy port
needs the file or address and the remedy, not a traceback. So `serve` checks the data directory
(writable, every database sound, the development signing keys readable) and binds its socket
*before* it loads the demo corpus or prints that it is serving, and every refusal is a
`StartupError`: one line on stderr and a distinct exit code.

Exit codes: 2 settings or arguments refused; 3 the data directory is unusable (read-only,
an empty, foreign or damaged file) or the shared PostgreSQL database cannot be reached; 4 the
address cannot be listened on.

Every command imports this module (the exit codes, `describe`), so it imports the server's modules
only in the checks that use them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import sqlite3
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aml_mcp.config import Settings

logger = logging.getLogger(__name__)

EXIT_SETTINGS = 2
EXIT_DATA_DIR = 3
EXIT_LISTEN = 4

STORE_DB = "aml-mcp.db"
DEVAUTH_DB = "devauth.db"


def databases() -> tuple[str, ...]:
    """Every SQLite file a server keeps in its data directory."""
    from aml_mcp.aml.notes.storage.sqlite import DB_FILE_NAME as NOTES_DB

    return (STORE_DB, NOTES_DB, DEVAUTH_DB)


class StartupError(Exception):
    """A command cannot start: `str()` is the one line to print, `exit_code` what to exit with."""

    def __init__(self, message: str, exit_code: int = EXIT_DATA_DIR) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def describe(exc: BaseException) -> StartupError | None:
    """The one-line refusal for an exception a command's start-up may meet, or None (a bug: let it show)."""
    from aml_mcp.store.sqlite import DatabaseFileError

    # psycopg is the server extra's: a command that never imported it cannot have met its error.
    psycopg = sys.modules.get("psycopg")
    if isinstance(exc, StartupError):
        return exc
    if isinstance(exc, DatabaseFileError):
        return StartupError(str(exc))
    if isinstance(exc, sqlite3.Error):
        return StartupError(f"a database in the data directory cannot be used: {exc}")
    if psycopg is not None and isinstance(exc, psycopg.OperationalError):
        # libpq's reason names the host and port, never the password.
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return StartupError(f"the shared PostgreSQL database cannot be used: {reason}")
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return StartupError(f"{where}{exc.strerror or exc}")
    return None


def check_data_dir(settings: Settings) -> Path:
    """Create the data directory if missing, and refuse one `serve` could not run on.

    Refuses (`StartupError`, exit 3): a directory that cannot be created or written; a database
    file that is empty, not SQLite, damaged (`PRAGMA quick_check`) or not writable; development
    signing keys that cannot be read. Each message names the file and the remedy.
    """
    from aml_mcp.store.sqlite import check_database_file

    try:
        data_dir = settings.ensure_data_dir()
    except OSError as exc:
        raise StartupError(
            f"the data directory {settings.data_dir} cannot be created ({exc.strerror or exc})"
        ) from exc
    _check_writable(data_dir)
    _warn_if_store_vanished(data_dir)
    for name in databases():
        path = data_dir / name
        check_database_file(path, thorough=True)
        _check_writable_file(path)
    if settings.auth.enabled and settings.auth.dev.enabled:
        _check_signing_keys(data_dir)
    return data_dir


USED_MARKER = Path("keys") / "request-state.key"
"""Written by every server start before the store is opened: its presence means "used before"."""


def _warn_if_store_vanished(data_dir: Path) -> None:
    """Say so when a used data directory has lost its store: starting anew is allowed (an operator
    may reset it on purpose) but never silent, because revocations recorded there are gone."""
    if (data_dir / USED_MARKER).exists() and not (data_dir / STORE_DB).exists():
        logger.warning(
            "%s is missing although %s has been used before: starting with an empty store, so every "
            "task, audit event and revocation recorded there is gone (restore it from a backup if "
            "that was not intended)",
            STORE_DB,
            data_dir,
        )


def _check_writable(data_dir: Path) -> None:
    try:
        fd, probe = tempfile.mkstemp(dir=data_dir, prefix=".aml-mcp-write-check-")
    except OSError as exc:
        raise StartupError(
            f"the data directory {data_dir} is not writable ({exc.strerror or exc}): "
            "point --data-dir at a writable directory"
        ) from exc
    os.close(fd)
    Path(probe).unlink(missing_ok=True)


def _check_writable_file(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise StartupError(
            f"{path} is not writable ({exc.strerror or exc}): the server must be able to write it"
        ) from exc
    os.close(fd)


def _check_signing_keys(data_dir: Path) -> None:
    from aml_mcp.devauth.keys import DevSigningKeys
    from aml_mcp.devauth.storage.files import KEY_FILE

    path = data_dir / KEY_FILE
    if not path.exists():
        return  # created on first use
    try:
        DevSigningKeys.in_data_dir(data_dir).jwks()
    except (OSError, ValueError) as exc:
        raise StartupError(
            f"{path} is damaged ({exc}): restore it from a backup, or remove it to make a new key "
            "(tokens signed by the old one then stop verifying)"
        ) from exc


def bind_listener(host: str, port: int) -> socket.socket:
    """A socket bound to `host:port` (not yet listening): fails before anything is loaded or claimed.

    Port 0 binds a free port; the caller reads it from `getsockname()`.
    """
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise StartupError(f"cannot listen on {host}:{port}: {exc.strerror}", EXIT_LISTEN) from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        hint = " (is another server running there?)" if exc.errno == errno.EADDRINUSE else ""
        raise StartupError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}{hint}", EXIT_LISTEN
        ) from exc
    sock.set_inheritable(True)
    return sock
