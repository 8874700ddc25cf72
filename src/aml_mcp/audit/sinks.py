"""Where else audit events go besides the table: a JSON-lines file and a logger.

`DATA_DIR/audit.jsonl` is for shipping to a log pipeline; the store's table is the copy of record
(`aml-mcp audit tail` reads it, and nothing prunes it). The file is written in ASCII JSON, one
event per line, so no event can break a line or fail to encode.

Rotation. The file is rotated by size inside the server: before a batch would take it past
`auth.audit_file_max_bytes`, `audit.jsonl` becomes `audit.jsonl.1` (`.1` becomes `.2`, and so on)
and a new file is started; `auth.audit_file_backups` old files are kept and the oldest is deleted.
A batch is never split across two files, so a file exceeds the size only when a single batch
(at most one flush interval's events) is larger than what is left; the disk the files can take is
about `(backups + 1) x max_bytes`. Set
`audit_file_max_bytes = 0` to leave rotation to an external tool: the sink checks before every
batch whether the path still names the file it has open, and reopens it when it does not, so
logrotate's default "rename and create" works without `copytruncate` and without a signal (there
is no SIGHUP handling to configure). A batch is written whole or not at all: if a write fails
midway (disk full), the file is cut back to where the batch began, closed, and reopened for the
next attempt — which is also how it recovers once the path is writable again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from aml_mcp.audit.events import AuditEvent, dumps, fallback_record, json_line

AUDIT_FILE_NAME = "audit.jsonl"
DEFAULT_FILE_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_FILE_BACKUPS = 8

logger = logging.getLogger(__name__)


def encode_lines(events: Sequence[AuditEvent]) -> tuple[bytes, int]:
    """The batch as ASCII JSON lines, and how many events had to be replaced by a placeholder."""
    lines: list[str] = []
    replaced = 0
    for event in events:
        try:
            lines.append(json_line(event))
        except Exception as error:  # one event's content must not cost the batch
            lines.append(dumps(fallback_record(event, error)) + "\n")
            replaced += 1
    return "".join(lines).encode("ascii"), replaced


class JsonLinesSink:
    """One JSON object per line appended to a file (no fsync), rotated by size (module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        max_bytes: int = DEFAULT_FILE_MAX_BYTES,
        backups: int = DEFAULT_FILE_BACKUPS,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.backups = max(1, backups)
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        self._size = 0
        self._regular = True
        self.rotations = 0
        """Times the file was rotated by size (since start)."""

    def write_batch(self, events: Sequence[AuditEvent]) -> int:
        data, replaced = encode_lines(events)
        if not data:
            return replaced
        self._open()
        # Cut the batch at line ends so that a file outgrows `max_bytes` by at most one line, however
        # the events happened to be batched (rotation must not depend on the flusher's timing).
        pending = bytearray()
        for line in data.splitlines(keepends=True):
            if pending and self.max_bytes > 0 and self._size + len(pending) + len(line) > self.max_bytes:
                self._append(bytes(pending))
                pending.clear()
            pending += line
        self._append(bytes(pending))
        return replaced

    def _append(self, data: bytes) -> None:
        """Whole lines, on a fresh file first if they would take this one past the limit; a write that
        fails midway is cut back, so the file never ends in half a line."""
        fd = self._open()
        if self._should_rotate(len(data)):
            self._rotate()
            fd = self._open()
        start = self._size
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError:
            with contextlib.suppress(OSError):  # not a regular file (e.g. a device): nothing to cut
                os.ftruncate(fd, start)
            self.close()
            raise
        self._size = start + len(data)

    def _open(self) -> int:
        """The open file, reopened when the path names another file (rotated away or replaced)."""
        if self._fd is not None:
            try:
                current = os.stat(self.path)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != self._identity:
                self.close()
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            info = os.fstat(fd)
            self._fd = fd
            self._identity = (info.st_dev, info.st_ino)
            self._size = info.st_size if stat.S_ISREG(info.st_mode) else 0
            self._regular = stat.S_ISREG(info.st_mode)
        return self._fd

    def _should_rotate(self, incoming: int) -> bool:
        if self.max_bytes <= 0 or not self._regular or self._size == 0:
            return False
        return self._size + incoming > self.max_bytes

    def _rotate(self) -> None:
        self.close()
        for number in range(self.backups - 1, 0, -1):
            older = self._backup(number)
            if older.exists():
                os.replace(older, self._backup(number + 1))
        with contextlib.suppress(FileNotFoundError):  # already moved away by someone else
            os.replace(self.path, self._backup(1))
        self.rotations += 1
        logger.info("audit file rotated: %s -> %s", self.path, self._backup(1))

    def _backup(self, number: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{number}")

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            self._identity = None
            with contextlib.suppress(OSError):
                os.close(fd)


class LoggerSink:
    """The JSON line on the `aml_mcp.audit` logger, for deployments that collect process logs."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("aml_mcp.audit")

    def write_batch(self, events: Sequence[AuditEvent]) -> int:
        data, replaced = encode_lines(events)
        for line in data.decode("ascii").splitlines():
            self.log.info(line)
        return replaced
