"""The audit trail's table, whichever database holds it: what a row is, how events become rows, and
the two protocols the rest of the server sees.

`AuditTable` is the audit log's sink into the table (the log drives it from its flusher thread);
`AuditReader` is the queries the lab and `aml-mcp audit tail` run on it. `sqlite.py` keeps the
trail in the data directory's SQLite file, `postgres.py` in the database replicas share; both
store the same columns from the same rows built here, so the two trails say the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.audit.events import AuditEvent, dumps
from aml_mcp.audit.log import AuditSink
from aml_mcp.store.text import storable


class AuditTable(AuditSink, Protocol):
    """The audit log's sink into the trail's table: `write_batch` on the flusher thread, and `close`
    once the log has written its last batch (it releases the connection)."""

    def close(self) -> None: ...


REQUEST_EVENTS = 16
"""Most records one request makes (the gate's, a handler's): a bound, never reached in practice."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BankQuery:
    """Which events of the trail the lab's audit view shows one caller (see `AuditReader.bank_events`)."""

    tenant: str
    after: int = 0
    limit: int = 100
    decision: str | None = None
    subject: str | None = None
    method: str | None = None
    except_method: str | None = None


class AuditReader(Protocol):
    """The queries the lab runs on the trail, whichever database holds it."""

    async def recent_events(self, limit: int) -> list[dict[str, Any]]: ...

    async def bank_events(self, query: BankQuery) -> list[dict[str, Any]]:
        """One bank's events with `seq > after`, oldest first, at most `limit` (the newest when more
        match). An event is the bank's when its verified tenant is `tenant`; an event with no tenant
        (a refusal before any credential was verified) is nobody's bank's, so no bank's view shows it."""
        ...

    async def head(self) -> int:
        """The newest event's number (0 for an empty trail): where a later `request_events` starts."""
        ...

    async def request_events(
        self, *, after: int, token_id: str | None, trace_id: str
    ) -> list[dict[str, Any]]:
        """The records of one request sent after `head` was `after`: those made with the token
        `token_id` (verified, or refused with it in `detail.unverified`) or carrying `trace_id`.

        Only for requests the server sent itself with a token and a trace id it chose at random (the
        lab's simulation), so whoever asks learns nothing about anybody else's requests."""
        ...


def matches_nothing(query: BankQuery) -> bool:
    """Whether the query asks for a tenant or an equality no stored event can have (U+0000 or an
    unpaired surrogate: no store keeps either raw): both readers then answer no events, without
    asking the database, which would fail on the value (PostgreSQL) or could not even send it."""
    return not storable(query.tenant) or not all(storable(value) for _, value in equality_filters(query))


def equality_filters(query: BankQuery) -> list[tuple[str, str]]:
    """The equality filters a query sets: (column, value)."""
    wanted = (("decision", query.decision), ("subject", query.subject), ("method", query.method))
    return [(column, value) for column, value in wanted if value is not None]


# -- rows -------------------------------------------------------------------------------------------

COLUMNS = (
    "seq",
    "time",
    "issuer",
    "subject",
    "tenant",
    "client_id",
    "token_id",
    "method",
    "target",
    "decision",
    "reason",
    "detail",
)
"""The columns a reader returns, in order (`seq` is the database's; the rest are `row_of`'s)."""

Row = tuple[Any, ...]
Prepared = tuple[AuditEvent, Row | None, BaseException | None]
"""An event, its row (or `None`) and the error formatting it raised (or `None`)."""


def prepare_row(event: AuditEvent) -> Prepared:
    """The event's row, or the error that formatting it raised (its placeholder is made on demand)."""
    try:
        return event, row_of(event.as_record()), None
    except Exception as error:
        return event, None, error


def _kept(value: Any) -> Any:
    """A column value as both stores keep it: U+0000, which PostgreSQL `TEXT` cannot hold, as the
    text `\\x00` (SQLite could keep it raw, but then the two trails would say different things,
    and on PostgreSQL the event would shrink to a placeholder)."""
    return value.replace("\x00", "\\x00") if isinstance(value, str) and "\x00" in value else value


def row_of(record: Mapping[str, Any]) -> Row:
    """An event record's row: every column of `COLUMNS` but `seq`, in order."""
    return tuple(_kept(value) for value in _columns_of(record))


def _columns_of(record: Mapping[str, Any]) -> Row:
    return (
        record["time"],
        record["issuer"],
        record["subject"],
        record["tenant"],
        record["client_id"],
        record["token_id"],
        record["method"],
        record["target"],
        record["decision"],
        record["reason"],
        dumps(record["detail"]) if record["detail"] else None,
    )


def event_of(row: Sequence[Any]) -> dict[str, Any]:
    """A row of `COLUMNS` as the event readers answer: its `detail` decoded."""
    event = dict(zip(COLUMNS, row, strict=True))
    if event["detail"]:
        event["detail"] = json.loads(event["detail"])
    return event


__all__ = [
    "COLUMNS",
    "REQUEST_EVENTS",
    "AuditReader",
    "AuditTable",
    "BankQuery",
    "Prepared",
    "Row",
    "equality_filters",
    "event_of",
    "matches_nothing",
    "prepare_row",
    "row_of",
]
