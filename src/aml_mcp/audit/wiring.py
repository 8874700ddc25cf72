"""Assembles the audit trail for the composition root: `build_audit(...) -> AuditTrail`.

The trail is built first, because every other component records into it, and closed last (its
`running()` is entered first), so the final decisions of a stopping server are still written.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from starlette.routing import BaseRoute

from aml_mcp.audit.anonymous import DEFAULT_MAX_DISTINCT, DEFAULT_WINDOW_SECONDS
from aml_mcp.audit.log import AuditLog, AuditSink
from aml_mcp.audit.sinks import (
    AUDIT_FILE_NAME,
    DEFAULT_FILE_BACKUPS,
    DEFAULT_FILE_MAX_BYTES,
    JsonLinesSink,
    LoggerSink,
)
from aml_mcp.scope_rules import ScopeRule


@dataclass(frozen=True, slots=True)
class AuditTrail:
    """The audit log as a `Component`: a flush-and-close when the app stops."""

    log: AuditLog
    routes: Sequence[BaseRoute] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.log.close()


def build_audit(
    table: AuditSink,
    *,
    data_dir: Path,
    to_file: bool,
    to_log: bool,
    file_max_bytes: int = DEFAULT_FILE_MAX_BYTES,
    file_backups: int = DEFAULT_FILE_BACKUPS,
    anonymous_window_seconds: float = DEFAULT_WINDOW_SECONDS,
    anonymous_max_distinct: int = DEFAULT_MAX_DISTINCT,
    flush_seconds: float = 0.1,
) -> AuditTrail:
    """Events go to `table` (the persistence object's: the SQLite file's, or the one every replica
    writes), and optionally to `DATA_DIR/audit.jsonl` and a logger."""
    sinks: list[AuditSink] = [table]
    if to_file:
        path = data_dir / AUDIT_FILE_NAME
        sinks.append(JsonLinesSink(path, max_bytes=file_max_bytes, backups=file_backups))
    if to_log:
        sinks.append(LoggerSink())
    log = AuditLog(
        sinks,
        flush_seconds=flush_seconds,
        anonymous_window_seconds=anonymous_window_seconds,
        anonymous_max_distinct=anonymous_max_distinct,
    )
    return AuditTrail(log)
