"""Every notes-store behaviour the search, case work, evaluation and ingest rely on, on SQLite and
on PostgreSQL alike; then what only the shared store has (replicas, the first-load lock).

Both rank the lexical half by BM25; that their scores agree is `test_note_store_bm25.py`'s. Here:
which notes match, and that the note holding a query's rare word ranks first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from aml_mcp.aml.notes.model import (
    CaseNote,
    InvalidTenantError,
    NoteFilter,
    Subject,
    UnstorableNoteError,
    VectorSpaceMismatchError,
)
from aml_mcp.aml.notes.storage import ForeignIdentifiers, NotesBackend
from aml_mcp.aml.notes.storage.postgres import PostgresIdentifierDirectory, PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteIdentifierDirectory, SqliteNotes
from aml_mcp.shared_secrets.storage.postgres import PostgresSecrets
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.notes import note_by_id, notes_in_row_order
from tests.support.postgres import scratch_schema

SPACE = "test-space"
DIMS = 8


@dataclass
class Notes:
    name: str
    store: NotesBackend
    directory: ForeignIdentifiers
    another: Callable[[], NotesBackend]
    """A second store on the same data (another replica, for PostgreSQL)."""


@pytest.fixture(params=["sqlite", "postgres"])
def notes(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Notes]:
    opened: list[NotesBackend] = []
    if request.param == "sqlite":

        def sqlite_store() -> NotesBackend:
            store = SqliteNotes.open(tmp_path)
            opened.append(store)
            return store

        first = SqliteNotes.open(tmp_path)
        opened.append(first)
        try:
            yield Notes("sqlite", first, SqliteIdentifierDirectory(first.path), sqlite_store)
        finally:
            for store in opened:
                store.close()
        return
    with scratch_schema() as (url, schema):

        def pg_store() -> NotesBackend:
            store = PostgresNotes(PostgresDatabase(url, schema=schema)).open()
            opened.append(store)
            return store

        pg = PostgresNotes(PostgresDatabase(url, schema=schema)).open()
        opened.append(pg)
        try:
            yield Notes("postgres", pg, PostgresIdentifierDirectory(pg), pg_store)
        finally:
            for store in opened:
                store.close()


def note(
    note_id: str,
    text: str,
    *,
    case_id: str = "CASE-1",
    day: int = 1,
    subjects: tuple[Subject, ...] = (),
    typologies: tuple[str, ...] = (),
    counterparties: tuple[str, ...] = (),
) -> CaseNote:
    return CaseNote(
        note_id=note_id,
        case_id=case_id,
        created_at=datetime(2026, 3, day, 12, tzinfo=UTC),
        text=text,
        subjects=subjects,
        typologies=typologies,
        counterparties=counterparties,
    )


def vectors(count: int, seed: int = 0) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    matrix = rng.standard_normal((count, DIMS)).astype(np.float32)
    normed: npt.NDArray[np.float32] = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    return normed


def write(store: NotesBackend, tenant: str, batch: list[CaseNote], space: str = SPACE) -> int:
    return store.tenant(tenant).replace_notes(batch, vectors(len(batch)), space=space)


BANK_A = [
    note(
        "A-1",
        "Structuring of cash deposits below the reporting threshold at the teller.",
        case_id="CASE-1",
        day=1,
        subjects=(Subject(name="Maria Lopez", account_id="ACC-0012"),),
        typologies=("structuring",),
    ),
    note(
        "A-2",
        "Wire transfers to a shell company in a secrecy jurisdiction.",
        case_id="CASE-2",
        day=5,
        subjects=(Subject(name="Oskar Brandt"),),
        typologies=("shell_company",),
        counterparties=("Blue Harbor Trading",),
    ),
    note("A-3", "Follow-up: the teller confirmed repeated cash deposits.", case_id="CASE-1", day=3),
]
BANK_B = [
    note(
        "B-1",
        "Trade invoices overstated for textile imports.",
        case_id="CASE-9",
        day=2,
        subjects=(Subject(name="Oskar Brandt", account_id="ACC-7777"),),
    ),
]


def rowid_of(store: NotesBackend, tenant: str, note_id: str) -> int:
    view = store.tenant(tenant)
    vecs = view.vectors()
    assert vecs is not None
    found = view.get([int(r) for r in vecs.rowids])
    return next(r for r, n in found.items() if n.note_id == note_id)


def test_notes_written_are_counted_and_read_back_whole(notes: Notes) -> None:
    assert write(notes.store, "bank-a", BANK_A) == 0
    view = notes.store.tenant("bank-a")
    assert view.count() == 3
    assert note_by_id(view, "A-2") == BANK_A[1]
    assert [n.note_id for n in notes_in_row_order(view, batch=2)] == ["A-1", "A-2", "A-3"]
    assert [len(b) for b in view.iter_texts(batch=2)] == [2, 1]
    assert notes.store.tenants() == ["bank-a"]


def test_writing_a_note_id_again_replaces_it(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    changed = note("A-1", "Rewritten: nothing about deposits any more.", case_id="CASE-1")
    assert write(notes.store, "bank-a", [changed]) == 1
    view = notes.store.tenant("bank-a")
    assert view.count() == 3
    assert note_by_id(view, "A-1") == changed
    assert view.identifier_matches(["acc0012"], NoteFilter()) == {}


def test_a_note_id_twice_in_one_batch_keeps_the_last(notes: Notes) -> None:
    first, second = note("X-1", "first words"), note("X-1", "second words")
    assert write(notes.store, "bank-a", [first, second]) == 1
    view = notes.store.tenant("bank-a")
    assert view.count() == 1
    assert note_by_id(view, "X-1") == second


def test_a_tenant_sees_only_its_own_notes(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    write(notes.store, "bank-b", BANK_B)
    a, b = notes.store.tenant("bank-a"), notes.store.tenant("bank-b")
    foreign_rowid = rowid_of(notes.store, "bank-a", "A-1")
    assert b.get([foreign_rowid]) == {}
    assert note_by_id(b, "A-1") is None
    assert b.case_notes("CASE-1") == []
    assert b.case_ids() == ["CASE-9"]
    assert b.lexical('"teller"', NoteFilter(), 10) == []
    assert b.identifier_matches(["acc0012"], NoteFilter()) == {}
    assert a.identifier_matches(["acc7777"], NoteFilter()) == {}
    assert sorted(notes.store.tenants()) == ["bank-a", "bank-b"]
    assert notes.store.tenant("bank-c").count() == 0
    assert notes.store.tenant("bank-c").vectors() is None


def test_a_malformed_tenant_is_refused(notes: Notes) -> None:
    for bad in ("", "Bank", "a/b", "a\x00b", "\ud800"):
        with pytest.raises(InvalidTenantError):
            notes.store.tenant(bad)


def test_lexical_finds_the_notes_holding_the_words_best_first(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    hits = view.lexical('"deposits" OR "shell"', NoteFilter(), 10)
    found = {view.get([h.rowid])[h.rowid].note_id for h in hits}
    assert found == {"A-1", "A-2", "A-3"}
    assert [h.bm25 for h in hits] == sorted(h.bm25 for h in hits)  # lower is better on both
    top = view.lexical('"secrecy" OR "teller"', NoteFilter(), 1)
    assert len(top) == 1
    # Stemming: "deposit" matches "deposits" on both backends.
    assert len(view.lexical('"deposit"', NoteFilter(), 10)) == 2


def test_filters_apply_to_every_lexical_and_identifier_path(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    ids = lambda rowids: sorted(n.note_id for n in view.get(list(rowids)).values())  # noqa: E731
    deposits = '"deposits"'
    assert ids(h.rowid for h in view.lexical(deposits, NoteFilter(case_id="CASE-1"), 10)) == ["A-1", "A-3"]
    assert ids(h.rowid for h in view.lexical(deposits, NoteFilter(typology="structuring"), 10)) == ["A-1"]
    third = datetime(2026, 3, 3, tzinfo=UTC).timestamp()
    assert ids(h.rowid for h in view.lexical(deposits, NoteFilter(date_from_ts=third), 10)) == ["A-3"]
    assert ids(view.matching(deposits, NoteFilter(date_to_ts=third), 10)) == ["A-1"]
    assert view.identifier_matches(["acc0012"], NoteFilter(case_id="CASE-2")) == {}
    assert view.lexical(deposits, NoteFilter(typology="struct"), 10) == []  # whole codes only
    assert view.lexical(deposits, NoteFilter(typology="%"), 10) == []


def test_matching_and_requires_every_word(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    both = view.matching('"teller" AND "confirmed"', NoteFilter(), 10)
    assert [view.get(both)[r].note_id for r in both] == ["A-3"]
    either = view.matching('"teller" OR "confirmed"', NoteFilter(), 10)
    assert len(either) == 2


def test_identifiers_are_found_normalised(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    a1 = rowid_of(notes.store, "bank-a", "A-1")
    a2 = rowid_of(notes.store, "bank-a", "A-2")
    assert view.identifier_matches(["acc0012"], NoteFilter()) == {a1: ["account_id:acc0012"]}
    assert view.identifier_matches(["oskar brandt"], NoteFilter()) == {a2: ["name:oskar brandt"]}
    assert view.identifier_matches(["blue harbor trading"], NoteFilter()) == {
        a2: ["name:blue harbor trading"]
    }
    assert view.identifier_matches([], NoteFilter()) == {}


def test_document_frequencies_count_notes_per_word(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    stats = view.document_frequencies(["deposits", "teller", "secrecy", "absentword"])
    assert stats is not None
    assert stats.documents == 3
    assert stats.df == {"deposits": 2, "teller": 2, "secrecy": 1, "absentword": 0}
    write(notes.store, "bank-a", [note("A-4", "secrecy again")])
    again = view.document_frequencies(["secrecy"])
    assert again is not None and (again.documents, again.df) == (4, {"secrecy": 2})
    assert notes.store.tenant("bank-z").document_frequencies(["x"]) is None


def test_case_notes_are_oldest_first_and_case_ids_sorted(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    assert [n.note_id for n in view.case_notes("CASE-1")] == ["A-1", "A-3"]
    assert view.case_ids() == ["CASE-1", "CASE-2"]
    assert view.case_notes("CASE-404") == []


def test_vectors_follow_the_generation(notes: Notes) -> None:
    view = notes.store.tenant("bank-a")
    assert view.generation() == 0
    write(notes.store, "bank-a", BANK_A)
    first = view.vectors()
    assert first is not None
    assert first.matrix.shape == (3, DIMS)
    assert view.vectors() is first  # cached while nothing is written
    np.testing.assert_allclose(first.matrix, vectors(3), atol=1e-3)  # float16 on disk
    assert sorted(first.case_rows) == ["CASE-1", "CASE-2"]
    assert list(first.typology_rows) == ["structuring", "shell_company"]
    write(notes.store, "bank-a", [note("A-9", "one more")])
    second = view.vectors()
    assert second is not None and second is not first
    assert second.generation > first.generation
    assert len(second.rowids) == 4


def test_one_vector_space_per_tenant(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    assert view.vector_space() == SPACE
    with pytest.raises(VectorSpaceMismatchError):
        write(notes.store, "bank-a", [note("A-5", "other space")], space="other")
    assert view.count() == 3


def test_replace_vectors_moves_the_tenant_to_another_space(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    generation = view.generation()
    texts = [row for batch in view.iter_texts() for row in batch]
    fresh = vectors(len(texts), seed=7)
    with pytest.raises(ValueError, match="every note"):
        view.replace_vectors([(texts[0][0], fresh[0])], space="new", generation=generation)
    write(notes.store, "bank-a", [note("A-3", "replaced meanwhile")])
    with pytest.raises(ValueError, match="changed"):
        view.replace_vectors(
            [(rowid, fresh[i]) for i, (rowid, _) in enumerate(texts)], space="new", generation=generation
        )
    texts = [row for batch in view.iter_texts() for row in batch]
    view.replace_vectors([(rowid, fresh[i]) for i, (rowid, _) in enumerate(texts)], space="new")
    assert view.vector_space() == "new"
    loaded = view.vectors()
    assert loaded is not None
    np.testing.assert_allclose(loaded.matrix, fresh, atol=1e-3)


def test_foreign_identifiers_are_other_banks_values_only(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    write(notes.store, "bank-b", BANK_B)
    found = notes.directory.foreign("bank-a", {"acc7777", "acc0012", "oskar brandt", "nothing"})
    assert found == {"acc7777"}  # Oskar Brandt is in both banks: not foreign
    assert notes.directory.foreign("bank-a", set()) == set()


def test_lookups_with_hostile_text_find_nothing(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    hostiles = ("A-1\x00", "\ud800", "\x00")
    for hostile in hostiles:
        assert view.case_notes(hostile) == []
        assert view.identifier_matches([hostile], NoteFilter()) == {}
        assert view.lexical('"deposits"', NoteFilter(case_id=hostile), 10) == []
        # SQLite's LIKE would end the pattern at the NUL and match every note: never sent.
        assert view.lexical('"deposits"', NoteFilter(typology=hostile), 10) == []
    assert notes.directory.foreign("bank-b", set(hostiles)) == set()


def test_a_note_holding_nul_is_refused_whole_by_both(notes: Notes) -> None:
    batch = [note("N-1", "fine"), note("N-2", "bad \x00 byte")]
    with pytest.raises(UnstorableNoteError, match="U\\+0000"):
        write(notes.store, "bank-a", batch)
    assert notes.store.tenant("bank-a").count() == 0  # all or nothing
    with pytest.raises(UnstorableNoteError):
        write(notes.store, "bank-a", [note("N-3", "ok", subjects=(Subject(name="Eve\x00"),))])


def test_an_expression_outside_the_lexical_grammar_is_refused(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    view = notes.store.tenant("bank-a")
    # SQLite would hand these to FTS5 as its own syntax: refused there too, so both answer alike.
    for bad in ("deposits", '"a" OR "b" AND "c"', '"a" NEAR "b"', '"a*"', '"x"); DROP TABLE aml_notes; --'):
        with pytest.raises(ValueError, match="lexical expression"):
            view.lexical(bad, NoteFilter(), 10)


def test_another_process_sees_writes_and_reloads_vectors(notes: Notes) -> None:
    write(notes.store, "bank-a", BANK_A)
    other = notes.another()
    seen = other.tenant("bank-a").vectors()
    assert seen is not None and len(seen.rowids) == 3
    write(notes.store, "bank-a", [note("A-7", "cash deposits again")])
    reloaded = other.tenant("bank-a").vectors()
    assert reloaded is not None and len(reloaded.rowids) == 4
    assert note_by_id(other.tenant("bank-a"), "A-7") is not None


def test_first_load_lets_one_of_several_starts_load(notes: Notes) -> None:
    if notes.name == "sqlite":
        with notes.store.first_load():
            pass  # one data directory, one process: nothing to hold
        return
    stores = [notes.another() for _ in range(3)]
    loaded: list[int] = []
    barrier = threading.Barrier(len(stores), timeout=60)

    def start(store: NotesBackend, number: int) -> None:
        barrier.wait()
        with store.first_load():
            if store.tenants():
                return
            write(store, "bank-a", BANK_A)
            loaded.append(number)

    threads = [threading.Thread(target=start, args=(s, i)) for i, s in enumerate(stores)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(loaded) == 1
    assert notes.store.tenant("bank-a").count() == 3


def test_one_process_at_a_time_moves_a_bank(notes: Notes) -> None:
    with notes.store.moving("bank-a") as mine:
        assert mine
        if notes.name == "postgres":
            other = notes.another()
            with other.moving("bank-a") as theirs:
                assert not theirs  # held by the first: the other waits for the switch instead
            with other.moving("bank-b") as theirs:
                assert theirs  # banks are moved independently
    if notes.name == "postgres":
        with notes.another().moving("bank-a") as theirs:
            assert theirs  # released at the end of the move


def test_a_first_load_on_one_replica_leaves_a_secret_created_on_another_unblocked() -> None:
    """The first load's session lock once had the shared secrets' key: while one replica loaded the
    demo corpus (up to a minute), another creating a secret on the fresh database waited for it."""
    with scratch_schema() as (url, schema):
        made: list[bytes] = []
        other_replica = PostgresSecrets(PostgresDatabase(url, schema=schema))
        with PostgresNotes(PostgresDatabase(url, schema=schema)) as loading, loading.first_load():
            creating = threading.Thread(target=lambda: made.append(other_replica.secret("request-state")))
            creating.start()
            creating.join(timeout=20)
            assert len(made) == 1 and len(made[0]) == 32  # created while the load holds its lock
