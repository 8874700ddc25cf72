"""One server per data directory: `aml-mcp serve` holds an OS file lock on `DATA_DIR/serve.lock`
for as long as its process lives.

Two servers on one data directory do quiet damage: the second rewrites `server.json` (so `aml-mcp
token` mints for its port), re-registers the lab's client with its own redirect URI (the first
server's lab sign-in then fails) and adds its issuer to the trusted ones, which outlives it. So the
second one refuses to start, in one line naming the one that runs (its pid and URL, which the lock
file holds) and exit status 3. The lock is `flock(2)`: the kernel drops it when the process ends,
however it ends (a crash, SIGKILL), so a stale file never blocks a restart, and the file itself is
left in place (removing it would let a third process lock a new file while a second holds the old).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from aml_mcp.cli.startup import EXIT_DATA_DIR, StartupError

LOCK_FILE = "serve.lock"
MAX_HOLDER_BYTES = 4096
"""The most of the lock file read to name its holder (it is a line of JSON)."""


class DataDirLock:
    """The held lock: `announce` writes who holds it, for the refusal a second server prints."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def announce(self, url: str) -> None:
        """Record this process and the URL it serves (once its port is bound) in the lock file."""
        line = json.dumps({"pid": os.getpid(), "url": url}).encode() + b"\n"
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, line, 0)


@contextlib.contextmanager
def hold_data_dir(data_dir: Path) -> Iterator[DataDirLock]:
    """Hold `data_dir`'s server lock until the block ends (or the process does); `StartupError`
    (exit 3) naming the holder when another process holds it."""
    path = data_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise StartupError(f"{path} cannot be opened: {error.strerror or error}") from error
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StartupError(
                f"another aml-mcp server {_holder(fd)} is serving {data_dir}: stop it first, or give "
                "this one a data directory of its own (--data-dir)",
                EXIT_DATA_DIR,
            ) from None
        yield DataDirLock(fd)
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def _holder(fd: int) -> str:
    """`(pid N, URL)` from the lock file, or `(still starting)` before the holder has written it."""
    try:
        document = json.loads(os.pread(fd, MAX_HOLDER_BYTES, 0) or b"null")
    except (OSError, ValueError):
        document = None
    if not isinstance(document, dict):
        return "(still starting)"
    pid, url = document.get("pid"), document.get("url")
    if not isinstance(pid, int) or not isinstance(url, str):
        return "(still starting)"
    from aml_mcp.client.terminal import terminal_text

    return f"(pid {pid}, {terminal_text(url)})"
