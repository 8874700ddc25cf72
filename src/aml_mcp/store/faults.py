"""One answer, for every backend, to "is this the storage failing, or a bug?".

A database fault is not the caller's fault nor the task's (DESIGN invariant 15): a task body that
dies of one is run again, a request under one is answered 503 with `Retry-After`. That needs one
classification that knows every store: SQLite's result codes (`store.sqlite`), PostgreSQL's and its
pool's errors (`store.postgres`), and the stores' own "unavailable right now" errors, which derive
from `StorageFault` (the notes' `NotesUnavailableError`, tasks' `StorageUnavailable`). Stores wrap
driver errors (`raise NotesUnavailableError(...) from exc`) and callers wrap stores' errors, so the
cause and context chain is walked: a tool's `RuntimeError` raised while handling a terminated
connection is that connection's fault.

Each backend's rules stay in the backend's module; they are imported here only once an exception of
that driver exists, so classifying never loads a driver the process did not load itself.
"""

from __future__ import annotations

CHAIN_DEPTH = 8
"""Links of the cause/context chain looked at; a storage fault deeper than this is not one."""


class StorageFault(Exception):
    """Base of a store's own error for "the storage cannot do this right now, for a reason that is
    not the caller's; nothing of the operation was applied". `cause` is short and fit for a client
    ("database unreachable", "disk full")."""

    def __init__(self, message: str, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


def storage_fault(exc: BaseException) -> str | None:
    """A short cause when `exc`, or an exception it was raised from or while handling, is the storage
    failing (unreachable, out of resources, locked, full, read-only, closed), else `None`."""
    seen: BaseException | None = exc
    for _ in range(CHAIN_DEPTH):
        if seen is None:
            return None
        cause = _own_fault(seen)
        if cause is not None:
            return cause
        seen = seen.__cause__ or seen.__context__
    return None


def _own_fault(exc: BaseException) -> str | None:
    if isinstance(exc, StorageFault):
        return exc.cause
    if isinstance(exc, BaseExceptionGroup):  # a task group's: a fault if any of its members is one
        return next((c for c in map(storage_fault, exc.exceptions) if c is not None), None)
    driver = type(exc).__module__.split(".", 1)[0]
    if driver in ("psycopg", "psycopg_pool"):
        from aml_mcp.store.postgres import storage_fault as postgres_fault

        return postgres_fault(exc)
    if driver == "sqlite3":
        from aml_mcp.store.sqlite import storage_fault as sqlite_fault

        return sqlite_fault(exc)
    if isinstance(exc, RuntimeError) and "not open" in str(exc):
        return "database closed"  # a store used while the server shuts down
    return None
