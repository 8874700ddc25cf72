"""SQLite storage for case notes, partitioned by tenant in every statement.

Why this shape:

* One `notes.db` file (WAL) in the data directory keeps the embedded default a single process
  with nothing to run beside it.
* Every tenant gets its **own FTS5 table** (`notes_fts_<n>`, `n` an integer the store mints), so a
  lexical query for one bank physically cannot read another bank's index, and BM25 statistics
  (document frequencies, average length) are each bank's own. Every other statement filters on
  `tenant_id` as well.
* Reads are only reachable through `TenantNotes`, which `NoteStore.tenant()` hands out for one
  validated tenant id: there is no method that searches without one.
* Where rows are already pinned by rowid, the tenant test is written `+tenant_id = ?`: still a
  filter on every row, but the unary plus stops SQLite from preferring the `(tenant_id, ...)`
  indexes, which would walk all of the tenant's notes (measured: 2.4 ms instead of 0.03 ms for
  ten notes at 10k notes per tenant).
* Note embeddings are computed by the caller at ingest and stored as float16 blobs beside the
  note; the store never computes them. A tenant's vectors are loaded into memory lazily on first
  use and reloaded only when that tenant's generation counter moves (any write bumps it).
* The file is owner-only (it holds every bank's notes) and an existing file that is empty or not
  SQLite is refused rather than taken for a new store. Damage found later (`verify` at start-up,
  or any read that meets a malformed page) is remembered: from then on every read fails with
  `NotesDamagedError` and readiness says why, because a search over a damaged index could
  silently miss the notes that matter.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.notes import CaseNote, Subject, normalise_identifier, normalise_name, validate_tenant
from aml_mcp.store.postgres import storable
from aml_mcp.store.sqlite import (
    DatabaseFileError,
    integrity_problem,
    is_damage,
    open_failure,
    prepare_database_file,
    restrict_to_owner,
)

_log = logging.getLogger(__name__)

DB_FILE_NAME = "notes.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    tenant_id   INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    generation  INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS notes (
    rowid        INTEGER PRIMARY KEY,
    tenant_id    INTEGER NOT NULL REFERENCES tenants(tenant_id),
    note_id      TEXT NOT NULL,
    case_id      TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    created_ts   REAL NOT NULL,
    typologies   TEXT NOT NULL,
    text         TEXT NOT NULL,
    subjects     TEXT NOT NULL,
    identifiers  TEXT NOT NULL,
    doc          TEXT NOT NULL,
    embedding    BLOB NOT NULL,
    UNIQUE (tenant_id, note_id)
);
CREATE INDEX IF NOT EXISTS notes_case ON notes (tenant_id, case_id);
CREATE TABLE IF NOT EXISTS note_identifiers (
    tenant_id  INTEGER NOT NULL,
    value      TEXT NOT NULL,
    kind       TEXT NOT NULL,
    note_rowid INTEGER NOT NULL REFERENCES notes(rowid) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS note_identifiers_lookup ON note_identifiers (tenant_id, value);
CREATE INDEX IF NOT EXISTS note_identifiers_note ON note_identifiers (note_rowid);
CREATE TABLE IF NOT EXISTS tenant_vector_spaces (
    tenant_id  INTEGER PRIMARY KEY REFERENCES tenants(tenant_id),
    space      TEXT NOT NULL
);
"""

_FTS_COLUMNS = ("text", "subjects", "identifiers")
"""FTS5 columns; `bm25()` weights in `LexicalQuery` follow this order."""


class NotesDamagedError(DatabaseFileError):
    """The notes database is damaged: nothing read from it can be trusted until it is restored.

    The message is one line without paths, fit for a readiness reason or a command's refusal.
    """


class UnstorableNoteError(ValueError):
    """A note holds text the stores do not keep as written (PostgreSQL `TEXT` refuses U+0000, no
    driver sends an unpaired surrogate); both stores refuse the whole batch before anything is
    written, so a file is refused alike wherever it is ingested."""


LEXICAL_EXPRESSION = re.compile(r'^"([^\W_]+)"(?:( OR | AND )"[^\W_]+")*$')
"""The lexical expressions a notes store takes (what `search.lexical` builds): double-quoted words
of letters and digits, joined by ` OR ` or by ` AND `."""


def checked_expression(match: str) -> str:
    """`match` if it is a lexical expression both stores read alike, else `ValueError`.

    SQLite would hand anything else to FTS5 as its own query syntax (a syntax error, or a query
    PostgreSQL reads differently); refused here, a hostile expression gets one answer on both."""
    if not LEXICAL_EXPRESSION.fullmatch(match):
        raise ValueError("a lexical expression is quoted words joined by OR or by AND")
    if ' OR "' in match and ' AND "' in match:
        raise ValueError("a lexical expression joins its words by OR or by AND, not both")
    return match


def refuse_unstorable_note(note: CaseNote) -> None:
    """Raise `UnstorableNoteError` when `note` holds text a notes store does not keep as written:
    U+0000 (PostgreSQL `TEXT` cannot hold it) or an unpaired surrogate (neither driver can send
    it). Both stores refuse such a note, so a file ingests the same way wherever it goes."""
    try:
        note.model_dump_json(exclude={"text"})
    except ValueError as exc:
        raise UnstorableNoteError(f"note {note.note_id!r} cannot be stored: {exc}") from exc
    texts = [
        note.note_id,
        note.case_id,
        note.text,
        typology_column(note.typologies),
        subjects_text(note.subjects),
        identifiers_text(note),
    ]
    if not all(storable(text) for text in texts) or not all(storable(v) for v, _ in identifier_rows(note)):
        raise UnstorableNoteError(
            f"note {note.note_id!r} holds a NUL character (U+0000) or an unpaired surrogate, "
            "which the notes store does not keep: remove it and ingest again"
        )


def refuse_unstorable_space(space: str) -> None:
    """Raise `UnstorableNoteError` for a vector space name no store keeps as written."""
    if not storable(space):
        raise UnstorableNoteError("a vector space name holds U+0000 or an unpaired surrogate")


class NotesUnavailableError(RuntimeError):
    """A shared notes store cannot be reached (or is out of resources) right now: retry later.

    The message is one short cause without addresses, fit for a tool error."""


class VectorSpaceMismatchError(RuntimeError):
    """A tenant's stored vectors come from a different embedder than the one now in use."""

    def __init__(self, tenant: str, stored: str, offered: str) -> None:
        super().__init__(
            f"tenant {tenant!r} has note vectors from {stored!r}, not {offered!r}: "
            "re-embed it (aml_mcp.aml.ingest.reembed_tenant) before writing or searching densely"
        )
        self.tenant = tenant
        self.stored = stored
        self.offered = offered


@dataclass(frozen=True, slots=True)
class TenantVectors:
    """A tenant's note vectors and the metadata dense search filters on, held in memory together.

    Arrays are aligned by row: `rowids[i]` is the note whose vector is `matrix[i]`.
    """

    generation: int
    rowids: npt.NDArray[np.int64]
    matrix: npt.NDArray[np.float32]
    created_ts: npt.NDArray[np.float64]
    coarse: npt.NDArray[np.float32] | None
    """For large tenants (two-stage search): `matrix @ coarse_basis`, `COARSE_DIMS` columns."""
    coarse_basis: npt.NDArray[np.float32] | None
    """The tenant's `COARSE_DIMS` principal directions (columns), so a query projects the same way."""
    case_rows: dict[str, npt.NDArray[np.int64]]
    """Row positions of each case's notes, so a case filter costs a dict lookup."""
    typology_rows: dict[str, npt.NDArray[np.int64]]


@dataclass(frozen=True, slots=True)
class NoteFilter:
    """Optional restrictions every search path applies the same way."""

    date_from_ts: float | None = None
    date_to_ts: float | None = None
    typology: str | None = None
    case_id: str | None = None

    def sql(self) -> tuple[str, list[object]]:
        """A SQL fragment (starting with `AND` or empty) over table alias `n`, and its parameters."""
        clauses: list[str] = []
        params: list[object] = []
        if self.date_from_ts is not None:
            clauses.append("n.created_ts >= ?")
            params.append(self.date_from_ts)
        if self.date_to_ts is not None:
            clauses.append("n.created_ts <= ?")
            params.append(self.date_to_ts)
        # A value no store can hold equals no stored value: the filter matches nothing (and a NUL
        # would end the LIKE pattern early, so that it matched every note).
        if self.case_id is not None and not storable(self.case_id):
            clauses.append("0")
        elif self.case_id is not None:
            clauses.append("n.case_id = ?")
            params.append(self.case_id)
        if self.typology is not None and not storable(self.typology):
            clauses.append("0")
        elif self.typology is not None:
            clauses.append("n.typologies LIKE ? ESCAPE '\\'")
            escaped = self.typology.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            params.append(f"%|{escaped}|%")
        return "".join(f" AND {c}" for c in clauses), params

    def mask(self, vectors: TenantVectors) -> npt.NDArray[np.bool_] | None:
        """The rows of `vectors` that pass, or `None` when nothing is filtered."""
        unfiltered = (self.date_from_ts, self.date_to_ts, self.typology, self.case_id) == (None,) * 4
        if unfiltered:
            return None
        keep = np.ones(len(vectors.rowids), dtype=np.bool_)
        if self.date_from_ts is not None:
            keep &= vectors.created_ts >= self.date_from_ts
        if self.date_to_ts is not None:
            keep &= vectors.created_ts <= self.date_to_ts
        if self.case_id is not None:
            keep &= _positions_mask(vectors.case_rows.get(self.case_id), len(keep))
        if self.typology is not None:
            keep &= _positions_mask(vectors.typology_rows.get(self.typology), len(keep))
        return keep


def _positions_mask(positions: npt.NDArray[np.int64] | None, size: int) -> npt.NDArray[np.bool_]:
    mask = np.zeros(size, dtype=np.bool_)
    if positions is not None:
        mask[positions] = True
    return mask


class NoteStore:
    """The notes database of one data directory.

    Thread-safe: one connection guarded by a lock, which suits SQLite's single writer and keeps
    reads cheap (the hot path is one FTS query and a numpy product).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        prepare_database_file(path)
        self._lock = threading.RLock()
        self._damage: str | None = None
        try:
            self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise DatabaseFileError(open_failure(path, exc)) from exc
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            self._conn.close()
            raise DatabaseFileError(open_failure(path, exc)) from exc
        restrict_to_owner(path)
        self._vectors: dict[int, TenantVectors] = {}
        self._lexical_stats: dict[int, _LexicalStats] = {}

    @classmethod
    def open(cls, data_dir: Path) -> NoteStore:
        """The store in `data_dir` (created if missing)."""
        return cls(data_dir / DB_FILE_NAME)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> NoteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def damage(self) -> str | None:
        """Why the store is known to be damaged (one line, no paths), or None."""
        return self._damage

    def verify(self) -> str | None:
        """Check every page (`PRAGMA quick_check`, on a connection of its own); returns `damage`.

        Reads the whole file, so it belongs to start-up, not to a request's path.
        """
        problem = integrity_problem(self.path)
        if problem is not None:
            self._mark_damaged(problem)
        return self._damage

    def probe(self) -> str | None:
        """A cheap readiness check (one query); returns `damage`, which a failing read also sets."""
        if self._damage is None:
            with contextlib.suppress(NotesDamagedError), self._reading() as conn:
                conn.execute("SELECT count(*) FROM tenants").fetchone()
        return self._damage

    def _mark_damaged(self, problem: str) -> None:
        if self._damage is None:
            self._damage = f"{self.path.name} is damaged ({problem}): restore it from a backup"
            _log.error("notes store %s is damaged (%s): reads refused until restored", self.path, problem)

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Refuse to read a store known to be damaged; remember damage a statement runs into."""
        if self._damage is not None:
            raise NotesDamagedError(self._damage)
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            self._mark_damaged(str(exc))
            raise NotesDamagedError(self._damage or str(exc)) from exc

    def first_load(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: one data directory's first start runs in one process."""
        return contextlib.nullcontext()

    def moving(self, tenant: str) -> contextlib.AbstractContextManager[bool]:
        """Always this process's to move: one data directory's server is one process (the tenant
        is validated all the same, as `tenant` does, so both stores refuse the same names)."""
        validate_tenant(tenant)
        return contextlib.nullcontext(True)

    def tenant(self, tenant: str) -> TenantNotes:
        """The notes of one tenant: the only way to read or write notes."""
        return TenantNotes(self, validate_tenant(tenant))

    def tenants(self) -> list[str]:
        """Names of tenants that have been written to (for the operator, never for a tool)."""
        with self._reading():
            rows = self._conn.execute("SELECT name FROM tenants ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]

    # -- internals used by TenantNotes --------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guarded():
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guarded():
            yield self._conn

    def _tenant_id(self, conn: sqlite3.Connection, tenant: str, *, create: bool) -> int | None:
        row = conn.execute("SELECT tenant_id FROM tenants WHERE name = ?", (tenant,)).fetchone()
        if row is not None:
            return int(row[0])
        if not create:
            return None
        cur = conn.execute("INSERT INTO tenants (name) VALUES (?)", (tenant,))
        tenant_id = int(cur.lastrowid or 0)
        conn.execute(
            f"CREATE VIRTUAL TABLE {_fts_table(tenant_id)} USING fts5("
            f"{', '.join(_FTS_COLUMNS)}, content='notes', content_rowid='rowid', "
            "tokenize='porter unicode61 remove_diacritics 2')"
        )
        return tenant_id


def _fts_table(tenant_id: int) -> str:
    """The FTS5 table of a tenant; built from the store's own integer, never from caller text."""
    return f"notes_fts_{int(tenant_id)}"


def typology_column(typologies: Sequence[str]) -> str:
    """`|a|b|` so a LIKE on `%|a|%` matches whole codes only."""
    return "|" + "|".join(typologies) + "|" if typologies else "|"


def identifier_rows(note: CaseNote) -> list[tuple[str, str]]:
    """(normalised value, kind) pairs an exact-identifier query may hit for this note."""
    rows: list[tuple[str, str]] = [
        (normalise_identifier(note.note_id), "note_id"),
        (normalise_identifier(note.case_id), "case_id"),
    ]
    for subject in note.subjects:
        rows.append((normalise_name(subject.name), "name"))
        if subject.account_id:
            rows.append((normalise_identifier(subject.account_id), "account_id"))
    for counterparty in note.counterparties:
        rows.append((normalise_name(counterparty), "name"))
    return [(v, k) for v, k in dict.fromkeys(rows) if v]


_DF_CACHE_SIZE = 50_000
COARSE_FROM = 30_000
"""Tenants with at least this many notes get a coarse matrix for two-stage dense search."""
COARSE_DIMS = 64


@dataclass(frozen=True, slots=True)
class TermStatistics:
    """Document frequencies of some terms within one tenant's notes."""

    documents: int
    df: dict[str, int]


@dataclass(slots=True)
class _LexicalStats:
    """Per-tenant document count and term document frequencies, valid for one generation."""

    generation: int
    documents: int
    df: dict[str, int]


@dataclass(frozen=True, slots=True)
class LexicalHit:
    rowid: int
    bm25: float
    """FTS5 `bm25()`: lower (more negative) is better."""


class TenantNotes:
    """One tenant's notes: writes, lexical and dense candidate retrieval, and note lookup."""

    def __init__(self, store: NoteStore, tenant: str) -> None:
        self._store = store
        self.tenant = tenant

    # -- writes -------------------------------------------------------------------------------

    def replace_notes(
        self, notes: Sequence[CaseNote], embeddings: npt.NDArray[np.float32], *, space: str
    ) -> int:
        """Insert or replace `notes` with their `embeddings` (one row each) in one transaction.

        `space` names the embedder that made the vectors; a tenant's vectors must all share one
        (`VectorSpaceMismatchError` otherwise: re-embed the tenant first). All-or-nothing: any
        failure rolls the whole batch back. Returns how many notes replaced an existing note id.
        """
        if len(notes) != len(embeddings):
            raise ValueError("one embedding per note is required")
        refuse_unstorable_space(space)
        for note in notes:
            refuse_unstorable_note(note)
        blobs = np.ascontiguousarray(embeddings, dtype=np.float16)
        replaced = 0
        with self._store._transaction() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=True)
            assert tenant_id is not None
            current = conn.execute(
                "SELECT space FROM tenant_vector_spaces WHERE tenant_id = ?", (tenant_id,)
            ).fetchone()
            if current is None:
                conn.execute(
                    "INSERT INTO tenant_vector_spaces (tenant_id, space) VALUES (?, ?)", (tenant_id, space)
                )
            elif current[0] != space:
                raise VectorSpaceMismatchError(self.tenant, str(current[0]), space)
            fts = _fts_table(tenant_id)
            for note, vector in zip(notes, blobs, strict=True):
                old = conn.execute(
                    "SELECT rowid, text, subjects, identifiers FROM notes "
                    "WHERE tenant_id = ? AND note_id = ?",
                    (tenant_id, note.note_id),
                ).fetchone()
                if old is not None:
                    replaced += 1
                    conn.execute(
                        f"INSERT INTO {fts} ({fts}, rowid, text, subjects, identifiers) "  # noqa: S608
                        "VALUES ('delete', ?, ?, ?, ?)",
                        old,
                    )
                    conn.execute("DELETE FROM note_identifiers WHERE note_rowid = ?", (old[0],))
                    conn.execute("DELETE FROM notes WHERE rowid = ?", (old[0],))
                subjects, identifiers = subjects_text(note.subjects), identifiers_text(note)
                cur = conn.execute(
                    "INSERT INTO notes (tenant_id, note_id, case_id, created_at, created_ts, typologies,"
                    " text, subjects, identifiers, doc, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        tenant_id,
                        note.note_id,
                        note.case_id,
                        note.created_at.isoformat(),
                        note.created_at.timestamp(),
                        typology_column(note.typologies),
                        note.text,
                        subjects,
                        identifiers,
                        note.model_dump_json(exclude={"text"}),
                        vector.tobytes(),
                    ),
                )
                rowid = int(cur.lastrowid or 0)
                idents = identifier_rows(note)
                conn.executemany(
                    "INSERT INTO note_identifiers (tenant_id, value, kind, note_rowid) VALUES (?, ?, ?, ?)",
                    [(tenant_id, value, kind, rowid) for value, kind in idents],
                )
                conn.execute(
                    f"INSERT INTO {fts} (rowid, text, subjects, identifiers) VALUES (?, ?, ?, ?)",  # noqa: S608
                    (rowid, note.text, subjects, identifiers),
                )
            conn.execute("UPDATE tenants SET generation = generation + 1 WHERE tenant_id = ?", (tenant_id,))
        with self._store._reading() as conn:
            conn.execute("PRAGMA optimize")
        return replaced

    # -- reads --------------------------------------------------------------------------------

    def vector_space(self) -> str | None:
        """The embedder this tenant's note vectors were made with (`None` before any write)."""
        with self._store._reading() as conn:
            row = conn.execute(
                "SELECT s.space FROM tenant_vector_spaces s JOIN tenants t ON t.tenant_id = s.tenant_id "
                "WHERE t.name = ?",
                (self.tenant,),
            ).fetchone()
        return None if row is None else str(row[0])

    def generation(self) -> int:
        """A counter every write to this tenant moves (0 before the first write)."""
        with self._store._reading() as conn:
            row = conn.execute("SELECT generation FROM tenants WHERE name = ?", (self.tenant,)).fetchone()
        return 0 if row is None else int(row[0])

    def replace_vectors(
        self,
        vectors: Sequence[tuple[int, npt.NDArray[np.float32]]],
        *,
        space: str,
        generation: int | None = None,
    ) -> None:
        """Swap every note vector of this tenant for one made in `space`, in one transaction.

        `vectors` must cover all of the tenant's notes (row id, vector); used to move a tenant
        to another embedder. With `generation` (read before the vectors were computed), refuses
        when any write happened since: a note re-ingested meanwhile may even reuse its row id.
        """
        refuse_unstorable_space(space)
        with self._store._transaction() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return
            if generation is not None:
                now = conn.execute(
                    "SELECT generation FROM tenants WHERE tenant_id = ?", (tenant_id,)
                ).fetchone()
                if int(now[0]) != generation:
                    raise ValueError("the tenant's notes changed while its vectors were computed")
            total = conn.execute("SELECT count(*) FROM notes WHERE tenant_id = ?", (tenant_id,)).fetchone()
            if int(total[0]) != len(vectors):
                raise ValueError("replace_vectors needs a vector for every note of the tenant")
            updated = conn.executemany(
                "UPDATE notes SET embedding = ? WHERE rowid = ? AND tenant_id = ?",
                [
                    (np.ascontiguousarray(v, dtype=np.float16).tobytes(), rowid, tenant_id)
                    for rowid, v in vectors
                ],
            ).rowcount
            if updated != len(vectors):
                # A note replaced since its vector was computed has a new row id: switching the
                # space now would leave it with a vector of the old one.
                raise ValueError("replace_vectors needs a vector for every note of the tenant")
            conn.execute(
                "INSERT INTO tenant_vector_spaces (tenant_id, space) VALUES (?, ?) "
                "ON CONFLICT (tenant_id) DO UPDATE SET space = excluded.space",
                (tenant_id, space),
            )
            conn.execute("UPDATE tenants SET generation = generation + 1 WHERE tenant_id = ?", (tenant_id,))

    def iter_texts(self, batch: int = 2000) -> Iterator[list[tuple[int, str]]]:
        """(row id, text) of every note in row order, in batches (for re-embedding)."""
        last = 0
        while True:
            with self._store._reading() as conn:
                tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
                if tenant_id is None:
                    return
                rows = conn.execute(
                    "SELECT rowid, text FROM notes WHERE tenant_id = ? AND rowid > ? ORDER BY rowid LIMIT ?",
                    (tenant_id, last, batch),
                ).fetchall()
            if not rows:
                return
            last = int(rows[-1][0])
            yield [(int(r[0]), str(r[1])) for r in rows]

    def count(self) -> int:
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return 0
            row = conn.execute("SELECT count(*) FROM notes WHERE tenant_id = ?", (tenant_id,)).fetchone()
        return int(row[0])

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None:
        """How many of the tenant's notes hold each term (FTS5 phrase count), and how many notes
        there are; `None` for a tenant with no notes. Cached per tenant until its next write."""
        with self._store._reading() as conn:
            row = conn.execute(
                "SELECT tenant_id, generation FROM tenants WHERE name = ?", (self.tenant,)
            ).fetchone()
            if row is None:
                return None
            tenant_id, generation = int(row[0]), int(row[1])
            stats = self._store._lexical_stats.get(tenant_id)
            if stats is None or stats.generation != generation:
                total = conn.execute(
                    "SELECT count(*) FROM notes WHERE tenant_id = ?", (tenant_id,)
                ).fetchone()
                stats = _LexicalStats(generation, int(total[0]), {})
                self._store._lexical_stats[tenant_id] = stats
            fts = _fts_table(tenant_id)
            for term in terms:
                if term not in stats.df:
                    if len(stats.df) > _DF_CACHE_SIZE:
                        stats.df.clear()
                    if not storable(term):  # no note holds it (PostgreSQL counts it as no word)
                        stats.df[term] = 0
                        continue
                    found = conn.execute(
                        f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?",  # noqa: S608
                        ('"' + term.replace('"', '""') + '"',),  # one FTS5 string, quotes doubled
                    ).fetchone()
                    stats.df[term] = int(found[0])
            return TermStatistics(stats.documents, {term: stats.df[term] for term in terms})

    def lexical(self, match: str, where: NoteFilter, limit: int) -> list[LexicalHit]:
        """Best `limit` notes for an FTS5 `match` expression by BM25, after `where`.

        The FTS table is the tenant's own, so without filters no join with `notes` is needed
        (that join costs a row lookup per matching document).
        """
        checked_expression(match)
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return []
            fts = _fts_table(tenant_id)
            extra, params = where.sql()
            if extra:
                sql = (
                    f"SELECT f.rowid, bm25({fts}, 1.0, 1.5, 1.5) AS s FROM {fts} f "  # noqa: S608
                    f"JOIN notes n ON n.rowid = f.rowid "
                    f"WHERE {fts} MATCH ? AND +n.tenant_id = ?{extra} ORDER BY s LIMIT ?"
                )
                args: list[object] = [match, tenant_id, *params, limit]
            else:
                sql = (
                    f"SELECT rowid, bm25({fts}, 1.0, 1.5, 1.5) AS s FROM {fts} "  # noqa: S608
                    f"WHERE {fts} MATCH ? ORDER BY s LIMIT ?"
                )
                args = [match, limit]
            rows = conn.execute(sql, args).fetchall()
        return [LexicalHit(int(r[0]), float(r[1])) for r in rows]

    def matching(self, match: str, where: NoteFilter, limit: int) -> list[int]:
        """Row ids of up to `limit` notes matching an FTS5 `match` expression, after `where`, unranked.

        Why unranked: a caller that only needs to know which notes match (the all-terms lift)
        would pay for BM25 on every match; without `ORDER BY` FTS5 stops at `limit`.
        """
        checked_expression(match)
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return []
            fts = _fts_table(tenant_id)
            extra, params = where.sql()
            if extra:
                sql = (
                    f"SELECT f.rowid FROM {fts} f JOIN notes n ON n.rowid = f.rowid "  # noqa: S608
                    f"WHERE {fts} MATCH ? AND +n.tenant_id = ?{extra} LIMIT ?"
                )
                args: list[object] = [match, tenant_id, *params, limit]
            else:
                sql = f"SELECT rowid FROM {fts} WHERE {fts} MATCH ? LIMIT ?"  # noqa: S608
                args = [match, limit]
            rows = conn.execute(sql, args).fetchall()
        return [int(r[0]) for r in rows]

    def identifier_matches(self, values: Sequence[str], where: NoteFilter) -> dict[int, list[str]]:
        """Notes with an identifier (normalised) in `values`: rowid -> the kinds:values matched."""
        values = [value for value in values if storable(value)]  # the others match no identifier
        if not values:
            return {}
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return {}
            extra, params = where.sql()
            marks = ",".join("?" * len(values))
            sql = (
                "SELECT i.note_rowid, i.kind, i.value FROM note_identifiers i "  # noqa: S608
                "JOIN notes n ON n.rowid = i.note_rowid "
                f"WHERE i.tenant_id = ? AND +n.tenant_id = ? AND i.value IN ({marks}){extra}"
            )
            rows = conn.execute(
                sql,
                [tenant_id, tenant_id, *values, *params],
            ).fetchall()
        found: dict[int, list[str]] = {}
        for rowid, kind, value in rows:
            found.setdefault(int(rowid), []).append(f"{kind}:{value}")
        return found

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]:
        """The notes with these row ids that belong to this tenant."""
        if not rowids:
            return {}
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return {}
            marks = ",".join("?" * len(rowids))
            rows = conn.execute(
                f"SELECT rowid, doc, text FROM notes WHERE rowid IN ({marks}) AND +tenant_id = ?",  # noqa: S608
                [*rowids, tenant_id],
            ).fetchall()
        return {int(r[0]): note_from_row(r[1], r[2]) for r in rows}

    def by_note_id(self, note_id: str) -> CaseNote | None:
        if not storable(note_id):
            return None
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return None
            row = conn.execute(
                "SELECT doc, text FROM notes WHERE tenant_id = ? AND note_id = ?", (tenant_id, note_id)
            ).fetchone()
        return None if row is None else note_from_row(row[0], row[1])

    def case_notes(self, case_id: str) -> list[CaseNote]:
        """All notes of one case of this tenant, oldest first (empty for unknown or foreign cases)."""
        if not storable(case_id):
            return []
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return []
            rows = conn.execute(
                "SELECT doc, text FROM notes WHERE tenant_id = ? AND case_id = ? "
                "ORDER BY created_ts, note_id",
                (tenant_id, case_id),
            ).fetchall()
        return [note_from_row(r[0], r[1]) for r in rows]

    def case_ids(self) -> list[str]:
        with self._store._reading() as conn:
            tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return []
            rows = conn.execute(
                "SELECT DISTINCT case_id FROM notes WHERE tenant_id = ? ORDER BY case_id", (tenant_id,)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def iter_notes(self, batch: int = 2000) -> Iterator[CaseNote]:
        """Every note of this tenant in row order, read in batches (for eval and export)."""
        last = 0
        while True:
            with self._store._reading() as conn:
                tenant_id = self._store._tenant_id(conn, self.tenant, create=False)
                if tenant_id is None:
                    return
                rows = conn.execute(
                    "SELECT rowid, doc, text FROM notes WHERE tenant_id = ? AND rowid > ? "
                    "ORDER BY rowid LIMIT ?",
                    (tenant_id, last, batch),
                ).fetchall()
            if not rows:
                return
            for rowid, doc, text in rows:
                last = int(rowid)
                yield note_from_row(doc, text)

    def vectors(self) -> TenantVectors | None:
        """This tenant's note vectors, from memory unless a write has happened since they were loaded."""
        store = self._store
        with store._reading() as conn:
            row = conn.execute(
                "SELECT tenant_id, generation FROM tenants WHERE name = ?", (self.tenant,)
            ).fetchone()
            if row is None:
                return None
            tenant_id, generation = int(row[0]), int(row[1])
            cached = store._vectors.get(tenant_id)
            if cached is not None and cached.generation == generation:
                return cached
            rows = conn.execute(
                "SELECT rowid, embedding, created_ts, case_id, typologies FROM notes "
                "WHERE tenant_id = ? ORDER BY rowid",
                (tenant_id,),
            ).fetchall()
            loaded = load_vectors(generation, rows)
            store._vectors[tenant_id] = loaded
            return loaded


def load_vectors(generation: int, rows: Sequence[tuple[int, bytes, float, str, str]]) -> TenantVectors:
    if not rows:
        return TenantVectors(
            generation,
            np.zeros(0, np.int64),
            np.zeros((0, 0), np.float32),
            np.zeros(0, np.float64),
            None,
            None,
            {},
            {},
        )
    dim = len(rows[0][1]) // 2
    buf = b"".join(r[1] for r in rows)
    matrix = np.frombuffer(buf, dtype=np.float16).reshape(len(rows), dim).astype(np.float32)
    cases: dict[str, list[int]] = {}
    typologies: dict[str, list[int]] = {}
    for position, row in enumerate(rows):
        cases.setdefault(row[3], []).append(position)
        for code in row[4].split("|"):
            if code:
                typologies.setdefault(code, []).append(position)
    basis = _principal_directions(matrix) if len(rows) >= COARSE_FROM else None
    return TenantVectors(
        generation=generation,
        rowids=np.fromiter((r[0] for r in rows), np.int64, len(rows)),
        matrix=matrix,
        created_ts=np.fromiter((r[2] for r in rows), np.float64, len(rows)),
        coarse=None if basis is None else np.ascontiguousarray(matrix @ basis),
        coarse_basis=basis,
        case_rows={k: np.asarray(v, dtype=np.int64) for k, v in cases.items()},
        typology_rows={k: np.asarray(v, dtype=np.int64) for k, v in typologies.items()},
    )


def _principal_directions(matrix: npt.NDArray[np.float32], sample: int = 8192) -> npt.NDArray[np.float32]:
    """The `COARSE_DIMS` directions along which the tenant's vectors vary most (a 384 x 64 basis).

    Why: a transformer's dimensions are not ordered by importance (the static table's, made by PCA,
    are), so the coarse pass projects both notes and query onto the tenant's own leading principal
    directions; dot products there approximate the full cosine well enough to keep the best
    `COARSE_KEEP` rows, which are then scored exactly. A fixed stride sample keeps it deterministic.
    """
    rows = matrix[:: max(1, len(matrix) // sample)]
    second_moment = rows.T.astype(np.float64) @ rows.astype(np.float64)
    _, vectors = np.linalg.eigh(second_moment)
    basis: npt.NDArray[np.float32] = np.ascontiguousarray(vectors[:, ::-1][:, :COARSE_DIMS], dtype=np.float32)
    return basis


def note_from_row(doc: str, text: str) -> CaseNote:
    """Rebuild a note from its stored JSON, which leaves the text out so the text is stored once.

    `doc` is always a non-empty JSON object written by `model_dump_json`, so splicing the text in
    as one more member is exact, and lets pydantic parse the whole row in one native call.
    """
    return CaseNote.model_validate_json(f'{doc[:-1]},"text":{json.dumps(text)}}}')


def subjects_text(subjects: Sequence[Subject]) -> str:
    return " ; ".join(" ".join(x for x in (s.name, s.account_id or "", s.role or "") if x) for s in subjects)


def identifiers_text(note: CaseNote) -> str:
    return " ".join([note.case_id, note.note_id, *note.counterparties])


def parse_iso_bound(value: str, *, end: bool) -> float:
    """A date or datetime filter bound as epoch seconds; a bare date covers its whole day."""
    from datetime import UTC, timedelta

    if len(value) == 10:
        day = datetime.fromisoformat(value).replace(tzinfo=UTC)
        return (day + timedelta(days=1)).timestamp() - 1e-6 if end else day.timestamp()
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
