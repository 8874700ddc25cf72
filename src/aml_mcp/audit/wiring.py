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
from aml_mcp.audit.storage.sqlite import MIGRATION, SqliteAuditTable
from aml_mcp.scope_rules import ScopeRule
from aml_mcp.store.migrations import Migration
from aml_mcp.store.sqlite import SqliteDatabase


@dataclass(frozen=True, slots=True)
class AuditTrail:
    """The audit log as a `Component`: its table, and a flush-and-close when the app stops."""

    log: AuditLog
    migrations: Sequence[Migration] = (MIGRATION,)
    routes: Sequence[BaseRoute] = ()
    scope_rules: Mapping[str, ScopeRule] = field(default_factory=dict)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        try:
            yield
        finally:
            self.log.close()


def build_audit(
    database: SqliteDatabase,
    *,
    data_dir: Path,
    to_file: bool,
    to_log: bool,
    file_max_bytes: int = DEFAULT_FILE_MAX_BYTES,
    file_backups: int = DEFAULT_FILE_BACKUPS,
    anonymous_window_seconds: float = DEFAULT_WINDOW_SECONDS,
    anonymous_max_distinct: int = DEFAULT_MAX_DISTINCT,
    flush_seconds: float = 0.1,
    table: AuditSink | None = None,
) -> AuditTrail:
    """Events go to the database table, and optionally to `DATA_DIR/audit.jsonl` and a logger.

    `table` replaces the SQLite file's table (replicas write the shared database's).
    """
    sinks: list[AuditSink] = [table if table is not None else SqliteAuditTable(database)]
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
