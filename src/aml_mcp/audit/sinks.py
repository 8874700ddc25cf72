"""Where else audit events go besides the table: a JSON-lines file and a logger."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from aml_mcp.audit.events import AuditEvent, json_line

AUDIT_FILE_NAME = "audit.jsonl"


class JsonLinesSink:
    """One JSON object per line appended to a file (kept open; flushed per batch; no fsync).

    The file is for shipping to a log pipeline; the store is the copy `aml-mcp audit tail` reads.
    Rotation is left to the operator's tooling (copytruncate-style rotation works: appends follow).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write("".join(json_line(event) for event in events))
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class LoggerSink:
    """The JSON line on the `aml_mcp.audit` logger, for deployments that collect process logs."""

    def __init__(self, log: logging.Logger | None = None) -> None:
        self.log = log or logging.getLogger("aml_mcp.audit")

    def write_batch(self, events: Sequence[AuditEvent]) -> None:
        for event in events:
            self.log.info(json_line(event).rstrip("\n"))
