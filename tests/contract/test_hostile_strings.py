"""Every query method of every store, on SQLite and on PostgreSQL, against hostile strings (N8).

NUL, a lone surrogate, 10,000 characters and SQL-looking text go into every parameter of every
store method that can carry text (`hostile.py` explains the rule and the coverage check). Both
backends must answer each case the same way: a lookup finds nothing, a write the store cannot keep
is refused with the store's own error before anything is sent, and nothing ever leaves as a driver
error (`psycopg.DataError`, `UnicodeEncodeError`, `sqlite3.Error`).

A review found `GET /lab/api/audit?subject=%00` answered 500 on PostgreSQL while SQLite answered
200: the stores disagreed on what a hostile value means. These tests pin one meaning on both.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest

from aml_mcp.aml.evaluation.storage import Baselines, UnstorableBaseline
from aml_mcp.aml.evaluation.storage import postgres as postgres_baselines
from aml_mcp.aml.evaluation.storage import sqlite as sqlite_baselines
from aml_mcp.aml.evaluation.storage.postgres import PostgresBaselines
from aml_mcp.aml.evaluation.storage.sqlite import SqliteBaselines
from aml_mcp.aml.notes.model import (
    CaseNote,
    InvalidTenantError,
    LexicalHalf,
    NoteFilter,
    Subject,
    UnstorableNoteError,
    VectorSpaceMismatchError,
)
from aml_mcp.aml.notes.storage import ForeignIdentifiers, NotesBackend, TenantNoteAccess
from aml_mcp.aml.notes.storage.postgres import PostgresIdentifierDirectory, PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteIdentifierDirectory, SqliteNotes
from aml_mcp.audit import AuditEvent, Decision
from aml_mcp.audit.log import AuditSink
from aml_mcp.audit.storage import AuditReader, BankQuery, prepare_row
from aml_mcp.audit.storage import postgres as postgres_audit
from aml_mcp.audit.storage.postgres import PostgresAuditReader, PostgresAuditTable
from aml_mcp.audit.storage.sqlite import (
    AUDIT_COMPONENT,
    AUDIT_MIGRATIONS,
    SqliteAuditReader,
    SqliteAuditTable,
)
from aml_mcp.auth.storage import InvalidRevocation, RevocationStore
from aml_mcp.auth.storage import postgres as postgres_revocations
from aml_mcp.auth.storage.postgres import PostgresRevocationStore
from aml_mcp.auth.storage.sqlite import REVOCATION_COMPONENT, REVOCATION_MIGRATIONS, SqliteRevocationStore
from aml_mcp.devauth.login_limits import LoginLimits
from aml_mcp.devauth.storage import (
    DevAuthStore,
    DevClient,
    Grant,
    KeyStorage,
    StoredCode,
    UnstorableValue,
    new_family,
)
from aml_mcp.devauth.storage.postgres import PostgresDevAuthStore, open_database
from aml_mcp.devauth.storage.sqlite import SqliteDevAuthStore
from aml_mcp.principal import Owner, Principal
from aml_mcp.shared_secrets.storage import SecretSource
from aml_mcp.shared_secrets.storage.files import FilesSecrets
from aml_mcp.shared_secrets.storage.postgres import PostgresSecrets
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.sqlite import SqliteDatabase
from aml_mcp.store.text import storable
from aml_mcp.tasks.model import TaskStatus
from aml_mcp.tasks.storage import MAX_KEY_CHARS, Change, LeaseReport, TaskStore, UnstorableTask
from tests.contract.conftest import Backend
from tests.contract.hostile import (
    HOSTILE,
    Case,
    Refused,
    always,
    mismatches,
    refused_unless,
    refused_unless_storable,
    uncovered,
    valid_unicode,
)
from tests.support.postgres import scratch_database, scratch_schema
from tests.tasks.factories import owner, record

pytestmark = pytest.mark.anyio

HOSTILE_IDS = list(HOSTILE)
NOW = 1_800_000_000_000


def hostile_values() -> Any:
    return pytest.mark.parametrize("hostile", list(HOSTILE.values()), ids=HOSTILE_IDS)


async def assert_same_answers(cases: list[Case], place: Any, hostile: str) -> None:
    wrong = await mismatches(cases, place, hostile)
    assert not wrong, "\n".join(wrong)


# == tasks =========================================================================================


@dataclass
class Tasks:
    store: TaskStore
    held: str
    """A live task of `owner()` that `runner-1` holds: lookups with hostile values must not reach it."""
    lapsed: str
    """A live task whose lease lapsed: a claim takes it."""


async def seeded_tasks(store: TaskStore) -> Tasks:
    held = record(owner(), now=NOW, holder="runner-1", lease_ms=60_000)
    lapsed = record(owner(subject="bob"), now=NOW - 1, holder="runner-dead", lease_ms=-1)
    await store.create(held)
    await store.create(lapsed)
    return Tasks(store, held.task_id, lapsed.task_id)


async def _holder_of_held(tasks: Tasks) -> tuple[str | None, int | None]:
    found = await tasks.store.find(tasks.held, owner(), NOW)
    assert found is not None
    return found.lease_holder, found.lease_expires_at


async def _create(tasks: Tasks, **fields: Any) -> str | None:
    who = fields.pop("who", owner())
    task = record(who, now=NOW, **fields)
    await tasks.store.create(task)
    found = await tasks.store.find(task.task_id, who, NOW)
    return found.task_id if found is not None else None


class _Hostile:
    """Stands for the hostile string in a case's fields (`_fill` puts it in)."""


_H: Any = _Hostile()


def _fill(value: Any, hostile: str) -> Any:
    """`value` with every `_H` in it (in dicts, lists and owners too) replaced by `hostile`."""
    if value is _H:
        return hostile
    if isinstance(value, dict):
        return {key: _fill(item, hostile) for key, item in value.items()}
    if isinstance(value, list):
        return [_fill(item, hostile) for item in value]
    if isinstance(value, Owner):
        return Owner(
            *(_fill(getattr(value, name), hostile) for name in ("issuer", "subject", "tenant", "client_id"))
        )
    return value


def _created(**fields: Any) -> Any:
    async def run(tasks: Tasks, hostile: str) -> object:
        return await _create(tasks, **_fill(fields, hostile)) is not None

    return run


async def _keyed(tasks: Tasks, hostile: str) -> object:
    """A keyed create, then its repeat: the second names the first task (when the key is kept)."""
    first = record(owner(), now=NOW)
    held = await tasks.store.create(first, idempotency_key=hostile)
    again = await tasks.store.create(record(owner(), now=NOW + 1), idempotency_key=hostile)
    return held == first and again == first


def _key_kept(hostile: str) -> bool:
    return storable(hostile) and len(hostile) <= MAX_KEY_CHARS


async def _transition(tasks: Tasks, hostile: str, change: Change) -> object:
    task = record(owner(), now=NOW, holder="runner-2")
    await tasks.store.create(task)
    changed = await tasks.store.transition(
        task.task_id, owner(), expected_version=task.version, change=change, now_ms=NOW, holder="runner-2"
    )
    return changed is not None


def _owners(hostile: str) -> list[Owner]:
    base = owner()
    return [
        replace(base, issuer=hostile),
        replace(base, subject=hostile),
        replace(base, tenant=hostile),
        replace(base, client_id=hostile),
    ]


async def _find_any(tasks: Tasks, hostile: str) -> object:
    return [await tasks.store.find(tasks.held, who, NOW) for who in _owners(hostile)]


async def _scope_any(tasks: Tasks, hostile: str) -> object:
    return [await tasks.store.scope_of(tasks.held, who, NOW) for who in _owners(hostile)]


async def _transition_any_owner(tasks: Tasks, hostile: str) -> object:
    return [
        await tasks.store.transition(
            tasks.held, who, expected_version=1, change=Change(status_message="x"), now_ms=NOW
        )
        for who in _owners(hostile)
    ]


def _report(report: LeaseReport) -> tuple[list[str], list[str]]:
    return sorted(report.held), sorted(report.cancel_requested)


async def _claim_excluding(tasks: Tasks, hostile: str) -> object:
    claimed = await tasks.store.claim("runner-9", NOW, NOW + 60_000, 10, exclude=[hostile])
    return [task.task_id == tasks.lapsed for task in claimed]


async def _claim_as(tasks: Tasks, hostile: str) -> object:
    return len(await tasks.store.claim(hostile, NOW, NOW + 60_000, 10))


async def _release(tasks: Tasks, hostile: str) -> object:
    await tasks.store.release(hostile)
    return await _holder_of_held(tasks)


async def _release_handed(tasks: Tasks, hostile: str) -> object:
    await tasks.store.release("nobody", [hostile])
    return await _holder_of_held(tasks)


async def _abandon_id(tasks: Tasks, hostile: str) -> object:
    await tasks.store.abandon(hostile, "runner-1")
    return await _holder_of_held(tasks)


async def _abandon_holder(tasks: Tasks, hostile: str) -> object:
    await tasks.store.abandon(tasks.held, hostile)
    return await _holder_of_held(tasks)


HELD = ("runner-1", NOW + 60_000)
"""The held task's lease, unchanged by every hostile lookup."""

TASK_CASES = [
    # lookups: nothing is found, nothing changes
    Case("find", "task_id", lambda t, h: t.store.find(h, owner(), NOW), always(None)),
    Case("find", "owner", _find_any, always([None] * 4)),
    Case("scope_of", "task_id", lambda t, h: t.store.scope_of(h, owner(), NOW), always(None)),
    Case("scope_of", "owner", _scope_any, always([None] * 4)),
    Case(
        "transition",
        "task_id",
        lambda t, h: t.store.transition(h, owner(), expected_version=1, change=Change(), now_ms=NOW),
        always(None),
    ),
    Case("transition", "owner", _transition_any_owner, always([None] * 4)),
    Case(
        "transition",
        "holder",
        lambda t, h: t.store.transition(
            t.held, owner(), expected_version=1, change=Change(status_message="x"), now_ms=NOW, holder=h
        ),
        always(None),
    ),
    Case("renew", "holder", lambda t, h: _renewed(t, h), always(([], []))),
    Case("renew", "task_ids", lambda t, h: _renewed(t, "runner-1", [h]), always(([], []))),
    Case("release", "holder", _release, always(HELD)),
    Case("release", "handed_over", _release_handed, always(HELD)),
    Case("abandon", "task_id", _abandon_id, always(HELD)),
    Case("abandon", "holder", _abandon_holder, always(HELD)),
    Case("claim", "exclude", _claim_excluding, always([True])),
    # writes: what no store can keep is refused before anything is sent
    Case("claim", "holder", _claim_as, refused_unless_storable(UnstorableTask, 0)),
    Case("create", "task", _created(task_id=_H), refused_unless_storable(UnstorableTask, True)),
    Case("create", "task", _created(tool=_H), refused_unless_storable(UnstorableTask, True)),
    Case("create", "task", _created(scope=_H), refused_unless_storable(UnstorableTask, True)),
    Case("create", "task", _created(holder=_H), refused_unless_storable(UnstorableTask, True)),
    Case("create", "task", _created(status_message=_H), refused_unless(valid_unicode, UnstorableTask, True)),
    Case(
        "create", "task", _created(arguments={"k": _H}), refused_unless(valid_unicode, UnstorableTask, True)
    ),
    Case(
        "create",
        "task",
        _created(result=None, error=None, input_requests={"q": _H}),
        refused_unless(valid_unicode, UnstorableTask, True),
    ),
    Case(
        "create",
        "idempotency_key",
        lambda t, h: _keyed(t, h),
        refused_unless(_key_kept, UnstorableTask, True),
    ),
    # The owner is kept as bytes on PostgreSQL (a claim may hold NUL), so only a surrogate is refused.
    Case(
        "create", "task", _created(who=owner(subject=_H)), refused_unless(valid_unicode, UnstorableTask, True)
    ),
    Case(
        "transition",
        "change",
        lambda t, h: _transition(t, h, Change(status_message=h)),
        refused_unless(valid_unicode, UnstorableTask, True),
    ),
    Case(
        "transition",
        "change",
        lambda t, h: _transition(t, h, Change(input_responses={"answer": h})),
        refused_unless(valid_unicode, UnstorableTask, True),
    ),
    Case(
        "transition",
        "change",
        lambda t, h: _transition(t, h, Change(status=TaskStatus.COMPLETED, result={"text": h})),
        refused_unless(valid_unicode, UnstorableTask, True),
    ),
]
TASK_TEXT_FREE = {"sweep"}


async def _renewed(tasks: Tasks, holder: str, task_ids: list[str] | None = None) -> object:
    return _report(await tasks.store.renew(holder, NOW + 60_000, NOW, task_ids))


def test_every_task_store_method_has_hostile_cases() -> None:
    assert not uncovered(TaskStore, TASK_CASES, TASK_TEXT_FREE)


@hostile_values()
async def test_task_store(backend: Backend, hostile: str) -> None:
    tasks = await seeded_tasks(backend.store)
    await assert_same_answers(TASK_CASES, tasks, hostile)
    assert await _holder_of_held(tasks) == HELD


# == case notes ====================================================================================

SPACE = "test-space"
DIMS = 8


def _note(note_id: str, text: str, **fields: Any) -> CaseNote:
    return CaseNote(
        note_id=note_id,
        case_id=fields.pop("case_id", "CASE-1"),
        created_at=datetime(2026, 3, 1, 12, tzinfo=UTC),
        text=text,
        **fields,
    )


def _vectors(count: int) -> Any:
    matrix = np.random.default_rng(7).standard_normal((count, DIMS)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


SEED = [
    _note(
        "A-1",
        "Structuring of cash deposits below the reporting threshold at the teller.",
        subjects=(Subject(name="Maria Lopez", account_id="ACC-0012"),),
        typologies=("structuring",),
    ),
    _note(
        "A-2", "Wire transfers to a shell company abroad.", case_id="CASE-2", typologies=("shell_company",)
    ),
]


@dataclass
class Notes:
    store: NotesBackend
    directory: ForeignIdentifiers

    @property
    def view(self) -> TenantNoteAccess:
        return self.store.tenant("bank-a")


@pytest.fixture(params=["sqlite", "postgres"])
def notes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Notes]:
    if request.param == "sqlite":
        store = SqliteNotes.open(tmp_path)
        try:
            store.tenant("bank-a").replace_notes(SEED, _vectors(len(SEED)), space=SPACE)
            yield Notes(store, SqliteIdentifierDirectory(store.path))
        finally:
            store.close()
        return
    with scratch_schema() as (url, schema):
        pg = PostgresNotes(PostgresDatabase(url, schema=schema)).open()
        try:
            pg.tenant("bank-a").replace_notes(SEED, _vectors(len(SEED)), space=SPACE)
            yield Notes(pg, PostgresIdentifierDirectory(pg))
        finally:
            pg.close()


def _moving(notes: Notes, hostile: str) -> object:
    with notes.store.moving(hostile) as mine:
        return mine


def _replace(notes: Notes, note: CaseNote, space: str = SPACE) -> object:
    return notes.view.replace_notes([note], _vectors(1), space=space)


def _with(note: CaseNote, **fields: Any) -> CaseNote:
    """`note` with `fields` as they are: the model refuses a lone surrogate, but the store must too
    (it is the last wall, and a note may reach it built by code rather than parsed)."""
    return note.model_copy(update=fields)


def _replace_vectors(notes: Notes, hostile: str) -> object:
    rows = [rowid for batch in notes.view.iter_texts() for rowid, _ in batch]
    notes.view.replace_vectors(list(zip(rows, _vectors(len(rows)), strict=True)), space=hostile)
    return notes.view.vector_space() == hostile


def _half(half: LexicalHalf) -> object:
    return (half.hits, half.every, half.identifiers)


def _frequencies(notes: Notes, hostile: str) -> object:
    stats = notes.view.document_frequencies([hostile, "deposits"])
    return None if stats is None else (stats.documents, stats.df)


NOTES_CASES = [
    Case("tenant", "tenant", lambda n, h: n.store.tenant(h), always(Refused(InvalidTenantError))),
    Case("moving", "tenant", _moving, always(Refused(InvalidTenantError))),
]
NOTES_TEXT_FREE = {"damage", "verify", "probe", "tenants", "first_load", "close"}

VIEW_CASES = [
    # lookups
    Case("case_notes", "case_id", lambda n, h: n.view.case_notes(h), always([])),
    Case(
        "identifier_matches", "values", lambda n, h: n.view.identifier_matches([h], NoteFilter()), always({})
    ),
    Case(
        "identifier_matches",
        "where",
        lambda n, h: n.view.identifier_matches(["acc0012"], NoteFilter(case_id=h)),
        always({}),
    ),
    Case(
        "identifier_matches",
        "where",
        lambda n, h: n.view.identifier_matches(["acc0012"], NoteFilter(typology=h)),
        always({}),
    ),
    Case(
        "lexical", "where", lambda n, h: n.view.lexical('"deposits"', NoteFilter(case_id=h), 10), always([])
    ),
    Case(
        "lexical", "where", lambda n, h: n.view.lexical('"deposits"', NoteFilter(typology=h), 10), always([])
    ),
    Case(
        "matching", "where", lambda n, h: n.view.matching('"deposits"', NoteFilter(case_id=h), 10), always([])
    ),
    Case(
        "matching",
        "where",
        lambda n, h: n.view.matching('"deposits"', NoteFilter(typology=h), 10),
        always([]),
    ),
    Case("document_frequencies", "terms", _frequencies, lambda h: (2, {h: 0, "deposits": 1})),
    Case(
        "lexical_half",
        "identifiers",
        lambda n, h: _half(n.view.lexical_half(None, None, [h], NoteFilter(), 10)),
        always(([], [], {})),
    ),
    Case(
        "lexical_half",
        "where",
        lambda n, h: _half(
            n.view.lexical_half('"deposits"', '"deposits"', ["acc0012"], NoteFilter(case_id=h), 10)
        ),
        always(([], [], {})),
    ),
    # expressions are what the search code builds: anything outside that grammar is refused
    Case("lexical", "match", lambda n, h: n.view.lexical(h, NoteFilter(), 10), always(Refused(ValueError))),
    Case("matching", "match", lambda n, h: n.view.matching(h, NoteFilter(), 10), always(Refused(ValueError))),
    Case(
        "lexical_half",
        "match",
        lambda n, h: n.view.lexical_half(h, None, [], NoteFilter(), 10),
        always(Refused(ValueError)),
    ),
    Case(
        "lexical_half",
        "every",
        lambda n, h: n.view.lexical_half(None, h, [], NoteFilter(), 10),
        always(Refused(ValueError)),
    ),
    # writes: a note (or a vector space name) no store can keep is refused whole
    Case(
        "replace_notes",
        "notes",
        lambda n, h: _replace(n, _with(_note("N-1", "fine", case_id="CASE-H"), text=h)),
        refused_unless_storable(UnstorableNoteError, 0),
    ),
    Case(
        "replace_notes",
        "notes",
        lambda n, h: _replace(
            n,
            _with(
                _note("N-2", "fine", case_id="CASE-H"),
                subjects=(Subject(name="x").model_copy(update={"name": h[:200]}),),
            ),
        ),
        refused_unless_storable(UnstorableNoteError, 0),
    ),
    Case(
        "replace_notes",
        "notes",
        lambda n, h: _replace(n, _with(_note("N-3", "fine", case_id="CASE-H"), author=h)),
        refused_unless(valid_unicode, UnstorableNoteError, 0),
    ),
    Case(
        "replace_notes",
        "space",
        lambda n, h: _replace(n, _note("N-4", "fine", case_id="CASE-H"), space=h),
        lambda h: Refused(VectorSpaceMismatchError if storable(h) else UnstorableNoteError),
    ),
    Case("replace_vectors", "space", _replace_vectors, refused_unless_storable(UnstorableNoteError, True)),
]
VIEW_TEXT_FREE = {
    "tenant",
    "vector_space",
    "generation",
    "iter_texts",
    "count",
    "get",
    "case_ids",
    "vectors",
}

DIRECTORY_CASES = [
    # A tenant no store can hold has no notes: every other bank's identifier is foreign to it.
    Case(
        "foreign", "tenant", lambda n, h: n.directory.foreign(h, {"acc0012", "nothing"}), always({"acc0012"})
    ),
    Case("foreign", "values", lambda n, h: n.directory.foreign("bank-b", {h}), always(set())),
]


def test_every_notes_method_has_hostile_cases() -> None:
    assert not uncovered(NotesBackend, NOTES_CASES, NOTES_TEXT_FREE)
    assert not uncovered(TenantNoteAccess, VIEW_CASES, VIEW_TEXT_FREE)
    assert not uncovered(ForeignIdentifiers, DIRECTORY_CASES, ())


@hostile_values()
async def test_notes_store(notes: Notes, hostile: str) -> None:
    await assert_same_answers(NOTES_CASES + DIRECTORY_CASES + VIEW_CASES, notes, hostile)
    assert [n.note_id for n in notes.view.case_notes("CASE-1")][:1] == ["A-1"]


# == evaluation baselines ==========================================================================


@pytest.fixture(params=["sqlite", "postgres"])
async def baselines(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Baselines]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "aml-mcp.db")
        db.open()
        await db.migrate(sqlite_baselines.COMPONENT, sqlite_baselines.MIGRATIONS)
        try:
            yield SqliteBaselines(db)
        finally:
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_baselines.MIGRATION)
        yield PostgresBaselines(pg)


def _analyst(**fields: str) -> Principal:
    values = {"issuer": "https://issuer.example", "subject": "alice", "tenant": "bank-a", "client_id": "c1"}
    return Principal(**{**values, **fields})


def _saved(field: str) -> Any:
    async def run(store: Baselines, hostile: str) -> object:
        saved = await store.save(_analyst(**{field: hostile}), f"digest-{field}", {"recall": 0.5})
        return saved.saved_by

    return run


async def _save_digest(store: Baselines, hostile: str) -> object:
    saved = await store.save(_analyst(), hostile, {"recall": 0.5})
    latest = await store.latest("bank-a")
    return latest is not None and latest.digest == saved.digest == hostile


async def _save_figures(store: Baselines, hostile: str) -> object:
    await store.save(_analyst(tenant="bank-f"), "digest-f", {"note": hostile})
    latest = await store.latest("bank-f")
    return latest is not None and latest.figures == {"note": hostile}


BASELINE_CASES = [
    Case("latest", "tenant", lambda s, h: s.latest(h), always(None)),
    Case("save", "principal", _saved("tenant"), refused_unless_storable(UnstorableBaseline, "alice")),
    Case(
        "save",
        "principal",
        _saved("subject"),
        lambda h: h if valid_unicode(h) else Refused(UnstorableBaseline),
    ),
    Case("save", "principal", _saved("issuer"), refused_unless(valid_unicode, UnstorableBaseline, "alice")),
    Case(
        "save", "principal", _saved("client_id"), refused_unless(valid_unicode, UnstorableBaseline, "alice")
    ),
    Case("save", "digest", _save_digest, refused_unless_storable(UnstorableBaseline, True)),
    Case("save", "figures", _save_figures, always(True)),
]


def test_every_baseline_method_has_hostile_cases() -> None:
    assert not uncovered(Baselines, BASELINE_CASES, ())


@hostile_values()
async def test_baseline_store(baselines: Baselines, hostile: str) -> None:
    await assert_same_answers(BASELINE_CASES, baselines, hostile)


# == audit trail ===================================================================================


@dataclass
class Trail:
    sink: AuditSink
    reader: AuditReader


@pytest.fixture(params=["sqlite", "postgres"])
async def trail(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Trail]:
    seed = [
        AuditEvent(
            decision=Decision.ALLOW, reason="ok", tenant="bank-a", subject="alice", method="m", target="a1"
        ),
        AuditEvent(
            decision=Decision.DENY, reason="no", tenant="bank-b", subject="bob", method="m", target="b1"
        ),
        AuditEvent(
            decision=Decision.ALLOW, reason="ok", tenant="bank-a", subject="carol", method="x", target="a2"
        ),
    ]
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "audit.db")
        db.open()
        await db.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        sink = SqliteAuditTable(db)
        try:
            await anyio.to_thread.run_sync(sink.write_batch, seed)
            yield Trail(sink, SqliteAuditReader(db))
        finally:
            sink.close()
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_audit.MIGRATION)
        pg_sink = PostgresAuditTable(pg.url, schema=pg.schema)
        try:
            await anyio.to_thread.run_sync(pg_sink.write_batch, seed)
            yield Trail(pg_sink, PostgresAuditReader(pg))
        finally:
            pg_sink.close()


def _bank_a(**query: Any) -> Any:
    async def run(trail: Trail, hostile: str) -> object:
        events = await trail.reader.bank_events(BankQuery(**{"tenant": "bank-a", **_fill(query, hostile)}))
        return [event["target"] for event in events]

    return run


def _written(field: str) -> Any:
    """An event whose `field` is hostile: written whole (no placeholder), read back as the one
    formatting both sinks share, with no NUL left in any column."""

    async def run(trail: Trail, hostile: str) -> object:
        event = AuditEvent(decision=Decision.DENY, reason="hostile", tenant="bank-h", **{field: hostile})
        placeholders = await anyio.to_thread.run_sync(trail.sink.write_batch, [event])
        stored = (await trail.reader.recent_events(1))[0]
        _, row, _ = prepare_row(event)
        assert row is not None
        columns = ("time", "issuer", "subject", "tenant", "client_id", "token_id", "method", "target")
        expected = dict(zip(columns, row[: len(columns)], strict=True))
        return (
            placeholders,
            stored[field] == expected[field],
            any("\x00" in value for value in stored.values() if isinstance(value, str)),
        )

    return run


AUDIT_CASES = [
    Case("bank_events", "query", _bank_a(tenant=_H), always([])),
    Case("bank_events", "query", _bank_a(subject=_H), always([])),
    Case("bank_events", "query", _bank_a(method=_H), always([])),
    Case("bank_events", "query", _bank_a(decision=_H), always([])),
    Case("bank_events", "query", _bank_a(except_method=_H), always(["a1", "a2"])),
    Case(
        "request_events",
        "token_id",
        lambda t, h: t.reader.request_events(after=0, token_id=h, trace_id="0" * 32),
        always([]),
    ),
    Case(
        "request_events",
        "trace_id",
        lambda t, h: t.reader.request_events(after=0, token_id=None, trace_id=h),
        always([]),
    ),
]
SINK_CASES = [
    Case("write_batch", "events", _written(field), always((0, True, False)))
    for field in ("issuer", "subject", "client_id", "token_id", "method", "target")
]


def test_every_audit_method_has_hostile_cases() -> None:
    assert not uncovered(AuditReader, AUDIT_CASES, {"recent_events", "head"})
    assert not uncovered(AuditSink, SINK_CASES, ())


@hostile_values()
async def test_audit_trail(trail: Trail, hostile: str) -> None:
    await assert_same_answers(AUDIT_CASES + SINK_CASES, trail, hostile)


# == revocations ===================================================================================


@pytest.fixture(params=["sqlite", "postgres"])
async def revocations(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[RevocationStore]:
    if request.param == "sqlite":
        db = SqliteDatabase(tmp_path / "auth.db")
        db.open()
        await db.migrate(REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)
        try:
            yield SqliteRevocationStore(db)
        finally:
            db.close()
        return
    async with scratch_database() as pg:
        await pg.apply(postgres_revocations.MIGRATION)
        yield PostgresRevocationStore(pg)


def _added(field: str) -> Any:
    async def run(store: RevocationStore, hostile: str) -> object:
        values = {
            "kind": "subject",
            "issuer": "https://issuer.example",
            "value": f"eve-{field}",
            "note": None,
        }
        values[field] = hostile
        await store.add(values["kind"], values["issuer"], values["value"], values["note"])
        return any(getattr(entry, field) == hostile for entry in await store.entries())

    return run


REVOCATION_CASES = [
    Case("lift", "kind", lambda s, h: s.lift(h, "https://issuer.example", "mallory"), always(False)),
    Case("lift", "issuer", lambda s, h: s.lift("subject", h, "mallory"), always(False)),
    Case("lift", "value", lambda s, h: s.lift("subject", "https://issuer.example", h), always(False)),
    Case("add", "kind", _added("kind"), always(Refused(InvalidRevocation))),
    Case("add", "issuer", _added("issuer"), refused_unless_storable(InvalidRevocation, True)),
    Case("add", "value", _added("value"), refused_unless_storable(InvalidRevocation, True)),
    Case("add", "note", _added("note"), refused_unless_storable(InvalidRevocation, True)),
]


def test_every_revocation_method_has_hostile_cases() -> None:
    assert not uncovered(RevocationStore, REVOCATION_CASES, {"entries", "fingerprint"})


@hostile_values()
async def test_revocation_store(revocations: RevocationStore, hostile: str) -> None:
    await revocations.add("subject", "https://issuer.example", "mallory", None)
    await assert_same_answers(REVOCATION_CASES, revocations, hostile)
    assert len(await revocations.entries()) >= 1


# == development authorization server ==============================================================


@pytest.fixture(params=["sqlite", "postgres"])
def devauth(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DevAuthStore]:
    if request.param == "sqlite":
        store: DevAuthStore = SqliteDevAuthStore(tmp_path / "devauth.db")
        try:
            yield store
        finally:
            store.close()
        return
    with scratch_schema() as (url, schema):
        pg_store = PostgresDevAuthStore(open_database(PostgresDatabase(url, schema=schema)))
        try:
            yield pg_store
        finally:
            pg_store.close()


def _client(**fields: Any) -> DevClient:
    values: dict[str, Any] = {"client_id": "client-1", "redirect_uris": ("https://app.example/cb",)}
    return DevClient(**{**values, **fields})


def _stored_code(**fields: str) -> StoredCode:
    values = {
        "client_id": "client-1",
        "scope": "aml:read",
        "subject": "alice",
        "tenant": "bank-a",
        "resource": "http://127.0.0.1:8000/mcp",
        "family": new_family(),
        "redirect_uri": "https://app.example/cb",
        "code_challenge": "c" * 43,
        "code_challenge_method": "S256",
    }
    return StoredCode(**{**values, **fields})


def _put_client(register: bool, field: str) -> Any:
    def run(store: DevAuthStore, hostile: str) -> object:
        suffix = "#registered" if register else ""
        if field == "client_id":
            client_id, value = hostile + suffix, hostile + suffix
        else:
            client_id, value = f"client-{field}{suffix}", hostile
        client = _client(**{"client_id": client_id, field: value})
        if register:
            store.register_client(client, max_total=1_000, max_per_minute=1_000)
        else:
            store.put_client(client)
        found = store.client(client_id)
        return found is not None and getattr(found, field) == value

    return run


def _put_code(field: str) -> Any:
    def run(store: DevAuthStore, hostile: str) -> object:
        code = f"code-{field}"
        store.put_code(code, _stored_code(**{field: hostile}))
        found = store.code(code, hostile if field == "client_id" else "client-1")
        return found is not None and getattr(found, field) == hostile

    return run


def _put_refresh(field: str) -> Any:
    def run(store: DevAuthStore, hostile: str) -> object:
        token = f"refresh-{field}"
        values = {
            "client_id": "client-1",
            "scope": "aml:read",
            "subject": "alice",
            "tenant": "bank-a",
            "resource": "http://127.0.0.1:8000/mcp",
            "family": new_family(),
        }
        stored = store.put_refresh_token(token, Grant(**{**values, field: hostile}), 3_600)
        found = store.refresh_token(token)
        return stored and found is not None and getattr(found, field) == hostile

    return run


def _code_of_client(store: DevAuthStore, hostile: str) -> object:
    store.put_code("code-known", _stored_code())
    return store.code("code-known", hostile)


def _code_presented(store: DevAuthStore, hostile: str) -> object:
    store.put_code(hostile, _stored_code())
    found = store.code(hostile, "client-1")
    return found is not None and store.redeem_code(found.code_sha256)


def _refresh_presented(store: DevAuthStore, hostile: str) -> object:
    values = {"client_id": "client-1", "scope": "s", "subject": "a", "tenant": "b", "resource": "r"}
    store.put_refresh_token(hostile, Grant(**values, family=new_family()), 3_600)
    found = store.refresh_token(hostile)
    return found is not None and store.redeem_refresh_token(found.token_sha256)


DEVAUTH_CASES = [
    # lookups
    Case("client", "client_id", lambda s, h: s.client(h), always(None)),
    Case("code", "code", lambda s, h: s.code(h, "client-1"), always(None)),
    Case("code", "client_id", _code_of_client, always(None)),
    Case("redeem_code", "code_sha256", lambda s, h: s.redeem_code(h), always(False)),
    Case("refresh_token", "token", lambda s, h: s.refresh_token(h), always(None)),
    Case("redeem_refresh_token", "token_sha256", lambda s, h: s.redeem_refresh_token(h), always(False)),
    # presented credentials are kept as digests, so any string works as one
    Case("put_code", "code", _code_presented, always(True)),
    Case("put_refresh_token", "token", _refresh_presented, always(True)),
    # writes: a column no store can keep is refused; JSON metadata escapes what it must
    *(
        Case(method, "client", _put_client(register, field), refused_unless_storable(UnstorableValue, True))
        for method, register in (("put_client", False), ("register_client", True))
        for field in ("client_id", "secret_sha256")
    ),
    *(
        Case(method, "client", _put_client(register, "client_name"), always(True))
        for method, register in (("put_client", False), ("register_client", True))
    ),
    *(
        Case("put_code", "stored", _put_code(field), refused_unless_storable(UnstorableValue, True))
        for field in ("client_id", "scope", "subject", "tenant", "resource", "family", "redirect_uri")
    ),
    *(
        Case(
            "put_refresh_token", "grant", _put_refresh(field), refused_unless_storable(UnstorableValue, True)
        )
        for field in ("client_id", "scope", "subject", "tenant", "resource", "family")
    ),
]


def _remembered(field: str) -> Any:
    def run(store: DevAuthStore, hostile: str) -> object:
        values = {"jti": f"jti-{field}", "family": new_family(), field: hostile}
        return store.remember_access_token(values["jti"], values["family"], time.time() + 60)

    return run


def _forgotten(store: DevAuthStore, hostile: str) -> object:
    store.forget_access_tokens([hostile])
    return store.revoked_access_tokens(10)


DEVAUTH_CASES += [
    Case("remember_access_token", "jti", _remembered("jti"), refused_unless_storable(UnstorableValue, True)),
    Case(
        "remember_access_token",
        "family",
        _remembered("family"),
        refused_unless_storable(UnstorableValue, True),
    ),
    Case("forget_access_tokens", "jtis", _forgotten, refused_unless_storable(UnstorableValue, [])),
    Case(
        "admit_login",
        "keys",
        lambda s, h: s.admit_login([h], LoginLimits()),
        refused_unless_storable(UnstorableValue, 0.0),
    ),
    Case(
        "login_succeeded",
        "reset",
        lambda s, h: s.login_succeeded(reset=[h], uncount=[]),
        refused_unless_storable(UnstorableValue),
    ),
    Case(
        "login_succeeded",
        "uncount",
        lambda s, h: s.login_succeeded(reset=[], uncount=[h]),
        refused_unless_storable(UnstorableValue),
    ),
]
DEVAUTH_TEXT_FREE = {"close", "revoked_access_tokens"}


def test_every_devauth_method_has_hostile_cases() -> None:
    assert not uncovered(DevAuthStore, DEVAUTH_CASES, DEVAUTH_TEXT_FREE)


@hostile_values()
async def test_devauth_store(devauth: DevAuthStore, hostile: str) -> None:
    await assert_same_answers(DEVAUTH_CASES, devauth, hostile)


# == server secrets and signing keys ===============================================================


@pytest.fixture(params=["files", "postgres"])
def secrets(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SecretSource]:
    if request.param == "files":  # the single-host default: files in the data directory
        yield FilesSecrets(tmp_path / "keys")
        return
    with scratch_schema() as (url, schema):
        yield PostgresSecrets(PostgresDatabase(url, schema=schema))


SECRET_CASES = [Case("secret", "name", lambda s, h: s.secret(h), always(Refused(ValueError)))]


def test_every_secret_and_key_method_has_hostile_cases() -> None:
    assert not uncovered(SecretSource, SECRET_CASES, ())
    # The signing keys' storage takes only bytes and functions of bytes: nothing to send it.
    assert not uncovered(KeyStorage, (), {"version", "read", "create", "update"})


@hostile_values()
async def test_secret_source(secrets: SecretSource, hostile: str) -> None:
    await assert_same_answers(SECRET_CASES, secrets, hostile)


# == the coverage check itself =====================================================================


def test_a_method_without_a_case_fails_the_contract() -> None:
    missing = uncovered(TaskStore, [case for case in TASK_CASES if case.method != "abandon"], TASK_TEXT_FREE)
    assert missing == [
        "TaskStore.abandon(task_id) has no hostile-string case",
        "TaskStore.abandon(holder) has no hostile-string case",
    ]
    assert uncovered(TaskStore, TASK_CASES, TASK_TEXT_FREE | {"find"}) == [
        "TaskStore.find is declared text-free but takes ['task_id', 'owner']"
    ]
    assert uncovered(TaskStore, TASK_CASES, set()) == ["TaskStore.sweep takes no text: declare it text-free"]


def test_a_driver_error_is_not_a_refusal() -> None:
    assert Refused(UnicodeEncodeError) != Refused(ValueError)
    assert Refused(sqlite3.IntegrityError) != Refused(UnstorableValue)
