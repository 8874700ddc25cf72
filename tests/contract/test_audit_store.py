"""The audit trail's table on SQLite and on PostgreSQL: the sink writes what the readers return,
a hostile row costs only itself, and `bank_events` and `request_events` select exactly the same
events on both.

The sink is driven on a worker thread, as the audit flusher drives it in the server.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from aml_mcp.audit import AuditEvent, Decision
from aml_mcp.audit.storage import AuditReader, BankQuery
from aml_mcp.audit.storage import postgres as postgres_audit
from aml_mcp.audit.storage.postgres import PostgresAuditReader, PostgresAuditTable
from aml_mcp.audit.storage.sqlite import (
    AUDIT_COMPONENT,
    AUDIT_MIGRATIONS,
    SqliteAuditReader,
    SqliteAuditTable,
)
from aml_mcp.store.sqlite import SqliteDatabase
from tests.support.postgres import scratch_database

pytestmark = pytest.mark.anyio


@dataclass
class Trail:
    write: Callable[[Sequence[AuditEvent]], int]
    reader: AuditReader


@pytest.fixture(params=["sqlite", "postgres"])
async def trail(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Trail]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "audit.db")
        db.open()
        await db.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        sink = SqliteAuditTable(db)
        try:
            yield Trail(sink.write_batch, SqliteAuditReader(db))
        finally:
            sink.close()
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_audit.MIGRATION)
        pg_sink = PostgresAuditTable(pg.url, schema=pg.schema)
        try:
            yield Trail(pg_sink.write_batch, PostgresAuditReader(pg))
        finally:
            pg_sink.close()


async def write(trail: Trail, events: Sequence[AuditEvent]) -> int:
    return await anyio.to_thread.run_sync(trail.write, events)


def allow(tenant: str | None, **fields: object) -> AuditEvent:
    return AuditEvent(decision=Decision.ALLOW, reason="ok", tenant=tenant, **fields)  # type: ignore[arg-type]


async def test_written_events_come_back_in_order_with_their_detail(trail: Trail) -> None:
    events = [allow("bank-a", target=f"t{n}", method="tools/call", detail={"n": n}) for n in range(5)]
    assert await write(trail, events) == 0
    got = await trail.reader.recent_events(3)
    assert [(e["target"], e["detail"]) for e in got] == [("t2", {"n": 2}), ("t3", {"n": 3}), ("t4", {"n": 4})]
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)


async def test_a_large_batch_keeps_every_event_in_order(trail: Trail) -> None:
    """PostgreSQL writes a batch as one INSERT of one array per column: a batch of 2,007 events
    loses nothing and keeps its order and its columns."""
    count = 2_007
    events = [allow(f"bank-{n % 3}", target=f"t{n}", detail={"n": n}) for n in range(count)]
    assert await write(trail, events) == 0
    got = await trail.reader.recent_events(count + 10)
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)
    assert [(e["target"], e["tenant"], e["detail"]) for e in got] == [
        (f"t{n}", f"bank-{n % 3}", {"n": n}) for n in range(count)
    ]


async def test_a_nul_in_a_column_is_kept_as_its_escape_on_both(trail: Trail) -> None:
    events = [
        allow("bank-a", target="before"),
        allow("bank-a", target="nul \x00 in a column", subject="x\x00y"),
        allow("bank-a", target="after", detail={"s": "nul \x00 in detail"}),
    ]
    placeholders = await write(trail, events)
    got = await trail.reader.recent_events(10)
    assert len(got) == 3
    assert got[0]["target"] == "before" and got[2]["target"] == "after"
    assert got[2]["detail"] == {"s": "nul \x00 in detail"}  # JSON escapes it: kept as it was
    # PostgreSQL TEXT cannot hold NUL: both stores keep the text `\x00` instead, so the event is
    # whole (no placeholder) and reads the same on both.
    assert placeholders == 0
    assert (got[1]["subject"], got[1]["target"]) == ("x\\x00y", "nul \\x00 in a column")


async def test_bank_events_selects_the_same_events_on_both(trail: Trail) -> None:
    mine_token, other_token = "jti-mine", "jti-other"
    events = [
        allow("bank-a", target="a1", subject="alice", method="tools/call"),
        allow("bank-b", target="b1", subject="bob"),
        allow("bank-b", target="b-with-my-token", token_id=mine_token),
        AuditEvent(
            decision=Decision.DENY,
            reason="bad",
            target="unverified-mine",
            detail={"unverified": {"jti": mine_token}},
        ),
        AuditEvent(
            decision=Decision.DENY,
            reason="bad",
            target="unverified-other",
            detail={"unverified": {"jti": other_token}},
        ),
        AuditEvent(
            decision=Decision.DENY, reason="no_token", target="anon-mine", detail={"trace_id": "tr-1"}
        ),
        AuditEvent(
            decision=Decision.DENY, reason="no_token", target="anon-other", detail={"trace_id": "tr-2"}
        ),
        AuditEvent(
            decision=Decision.DENY,
            reason="bad",
            target="anon-but-unverified",
            detail={"trace_id": "tr-1", "unverified": {"jti": other_token}},
        ),
        allow("bank-a", target="a2", subject="alice", method="subscriptions/listen"),
        AuditEvent(
            decision=Decision.DENY, reason="bad", target="nul-jti", detail={"unverified": {"jti": "x\x00y"}}
        ),
    ]
    await write(trail, events)
    reader = trail.reader

    async def targets(**query: Any) -> list[str]:
        return [e["target"] for e in await reader.bank_events(BankQuery(tenant="bank-a", **query))]

    assert await targets() == ["a1", "a2"]  # the bank's own verified events, nothing else
    assert await targets(except_method="subscriptions/listen") == ["a1"]
    assert await targets(method="subscriptions/listen") == ["a2"]
    assert await targets(subject="bob") == []
    assert await targets(limit=1) == ["a2"]
    first = (await reader.bank_events(BankQuery(tenant="bank-a")))[0]["seq"]
    assert await targets(after=first) == ["a2"]
    assert await targets(decision="deny") == []

    # One request's records (the lab's simulation): by its token, verified or not, or its trace id.
    async def of_request(token_id: str | None, trace_id: str, after: int = 0) -> list[str]:
        return [
            e["target"]
            for e in await reader.request_events(after=after, token_id=token_id, trace_id=trace_id)
        ]

    assert await of_request(mine_token, "tr-1") == [
        "b-with-my-token",
        "unverified-mine",
        "anon-mine",
        "anon-but-unverified",
    ]
    assert await of_request(None, "tr-2") == ["anon-other"]
    assert await of_request(None, "tr-none") == []
    # An id holding NUL is none the server chose: nothing, on both (SQLite's JSON could match it).
    assert await of_request("x\x00y", "tr-none") == []
    assert await of_request(mine_token, "tr-1", after=first + 3) == ["anon-mine", "anon-but-unverified"]
