"""SQLite storage for case notes, partitioned by tenant in every statement: `SqliteNotes`.

Why this shape:

* One `notes.db` file (WAL) in the data directory keeps the embedded default a single process
  with nothing to run beside it.
* Every tenant gets its **own FTS5 table** (`notes_fts_<n>`, `n` an integer the store mints), so a
  lexical query for one bank physically cannot read another bank's index, and BM25 statistics
  (document frequencies, average length) are each bank's own. Every other statement filters on
  `tenant_id` as well.
* Reads are only reachable through `SqliteTenantNotes`, which `SqliteNotes.tenant()` hands out for
  one validated tenant id: there is no method that searches without one.
* Where rows are already pinned by rowid, the tenant test is written `+tenant_id = ?`: still a
  filter on every row, but the unary plus stops SQLite from preferring the `(tenant_id, ...)`
  indexes, which would walk all of the tenant's notes (measured: 2.4 ms instead of 0.03 ms for
  ten notes at 10k notes per tenant).
* The file is owner-only (it holds every bank's notes); an empty or non-SQLite file is refused.
  Damage found later (`verify`, or a read meeting a malformed page) is remembered: every read then
  fails with `NotesDamagedError` and readiness says why (a damaged index could silently miss notes).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.notes.cache import GenerationCache
from aml_mcp.aml.notes.model import (
    STORED_COLUMNS,
    CaseNote,
    LexicalHalf,
    LexicalHit,
    NoteFilter,
    NotesDamagedError,
    TenantVectors,
    TermStatistics,
    VectorSpaceMismatchError,
    identifier_hits,
    note_from_row,
    refuse_unstorable_space,
    stored_notes,
    validate_tenant,
)
from aml_mcp.aml.notes.storage import checked_expression
from aml_mcp.aml.notes.vectors import VectorRow
from aml_mcp.store.sqlite import (
    DatabaseFileError,
    integrity_problem,
    is_damage,
    open_failure,
    prepare_database_file,
    restrict_to_owner,
)
from aml_mcp.store.text import storable

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
"""FTS5 columns; the `bm25()` weights in `SqliteTenantNotes._fts` follow this order."""


def _fts_table(tenant_id: int) -> str:
    """The FTS5 table of a tenant; built from the store's own integer, never from caller text."""
    return f"notes_fts_{int(tenant_id)}"


def _filter(where: NoteFilter) -> tuple[str, list[object]]:
    """`where` as a SQL fragment over table alias `n` (starting with ` AND `, or empty), and its
    parameters (`instr`, not `LIKE`, so that no typology is read as a pattern)."""
    return where.sql("?", "instr(n.typologies, ?) > 0")


class _NotesFile:
    """The one connection to `notes.db`, its lock, and what is known of its damage: what the store
    and its tenant views share.

    Thread-safe: one connection guarded by a lock, which suits SQLite's single writer and keeps
    reads cheap (the hot path is one FTS query and a numpy product).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        prepare_database_file(path)
        self._lock = threading.RLock()
        self.damage: str | None = None
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

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def mark_damaged(self, problem: str) -> None:
        if self.damage is None:
            self.damage = f"{self.path.name} is damaged ({problem}): restore it from a backup"
            _log.error("notes store %s is damaged (%s): reads refused until restored", self.path, problem)

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Refuse to read a store known to be damaged; remember damage a statement runs into."""
        if self.damage is not None:
            raise NotesDamagedError(self.damage)
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if not is_damage(exc):
                raise
            self.mark_damaged(str(exc))
            raise NotesDamagedError(self.damage or str(exc)) from exc

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
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
    def reading(self) -> Iterator[sqlite3.Connection]:
        with self._lock, self._guarded():
            yield self._conn

    @staticmethod
    def tenant_id(conn: sqlite3.Connection, tenant: str, *, create: bool) -> int | None:
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


class SqliteNotes:
    """The notes database of one data directory: the `NotesBackend` of a single server."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file = _NotesFile(path)
        self._cache = GenerationCache()

    @classmethod
    def open(cls, data_dir: Path) -> SqliteNotes:
        """The store in `data_dir` (created if missing)."""
        return cls(data_dir / DB_FILE_NAME)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> SqliteNotes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def damage(self) -> str | None:
        """Why the store is known to be damaged (one line, no paths), or None."""
        return self._file.damage

    def verify(self) -> str | None:
        """Check every page (`PRAGMA quick_check`, on a connection of its own); returns `damage`.

        Reads the whole file, so it belongs to start-up, not to a request's path.
        """
        problem = integrity_problem(self.path)
        if problem is not None:
            self._file.mark_damaged(problem)
        return self._file.damage

    def probe(self) -> str | None:
        """A cheap readiness check (one query); returns `damage`, which a failing read also sets."""
        if self._file.damage is None:
            with contextlib.suppress(NotesDamagedError), self._file.reading() as conn:
                conn.execute("SELECT count(*) FROM tenants").fetchone()
        return self._file.damage

    def first_load(self) -> contextlib.AbstractContextManager[None]:
        """Nothing to hold: one data directory's first start runs in one process."""
        return contextlib.nullcontext()

    def moving(self, tenant: str) -> contextlib.AbstractContextManager[bool]:
        """Always this process's to move: one data directory's server is one process (the tenant
        is validated all the same, as `tenant` does, so both stores refuse the same names)."""
        validate_tenant(tenant)
        return contextlib.nullcontext(True)

    def tenant(self, tenant: str) -> SqliteTenantNotes:
        """The notes of one tenant: the only way to read or write notes."""
        return SqliteTenantNotes(self._file, self._cache, validate_tenant(tenant))

    def tenants(self) -> list[str]:
        """Names of tenants that have been written to (for the operator, never for a tool)."""
        with self._file.reading() as conn:
            rows = conn.execute("SELECT name FROM tenants ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]


class SqliteTenantNotes:
    """One tenant's notes: writes, lexical and dense candidate retrieval, and note lookup."""

    def __init__(self, file: _NotesFile, cache: GenerationCache, tenant: str) -> None:
        self._file = file
        self._cache = cache
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
        rows = stored_notes(notes, embeddings, space=space)
        replaced = 0
        with self._file.transaction() as conn:
            tenant_id = self._file.tenant_id(conn, self.tenant, create=True)
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
            for row in rows:
                note = row.note
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
                cur = conn.execute(
                    f"INSERT INTO notes (tenant_id, created_at, {STORED_COLUMNS})"  # noqa: S608
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant_id, note.created_at.isoformat(), *row.values()),
                )
                rowid = int(cur.lastrowid or 0)
                conn.executemany(
                    "INSERT INTO note_identifiers (tenant_id, value, kind, note_rowid) VALUES (?, ?, ?, ?)",
                    [(tenant_id, value, kind, rowid) for value, kind in row.identifier_rows],
                )
                conn.execute(
                    f"INSERT INTO {fts} (rowid, text, subjects, identifiers) VALUES (?, ?, ?, ?)",  # noqa: S608
                    (rowid, note.text, row.subjects, row.identifiers),
                )
            conn.execute("UPDATE tenants SET generation = generation + 1 WHERE tenant_id = ?", (tenant_id,))
        with self._file.reading() as conn:
            conn.execute("PRAGMA optimize")
        return replaced

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
        with self._file.transaction() as conn:
            tenant_id = self._file.tenant_id(conn, self.tenant, create=False)
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

    # -- reads --------------------------------------------------------------------------------

    def vector_space(self) -> str | None:
        """The embedder this tenant's note vectors were made with (`None` before any write)."""
        with self._file.reading() as conn:
            row = conn.execute(
                "SELECT s.space FROM tenant_vector_spaces s JOIN tenants t ON t.tenant_id = s.tenant_id "
                "WHERE t.name = ?",
                (self.tenant,),
            ).fetchone()
        return None if row is None else str(row[0])

    def generation(self) -> int:
        """A counter every write to this tenant moves (0 before the first write)."""
        with self._file.reading() as conn:
            row = conn.execute("SELECT generation FROM tenants WHERE name = ?", (self.tenant,)).fetchone()
        return 0 if row is None else int(row[0])

    def _select(self, query: str, *params: object) -> list[Any]:
        """The rows of `query`, whose first parameter is the tenant's id and the others `params`;
        none before the tenant's first write."""
        with self._file.reading() as conn:
            tenant_id = self._file.tenant_id(conn, self.tenant, create=False)
            return [] if tenant_id is None else conn.execute(query, (tenant_id, *params)).fetchall()

    def _state(self, conn: sqlite3.Connection) -> tuple[int, int] | None:
        """(tenant id, generation) now, or None before the tenant's first write."""
        row = conn.execute(
            "SELECT tenant_id, generation FROM tenants WHERE name = ?", (self.tenant,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def iter_texts(self, batch: int = 2000) -> Iterator[list[tuple[int, str]]]:
        """(row id, text) of every note in row order, in batches (for re-embedding); the lock is let
        go between batches, so a slow consumer holds up no one."""
        query = "SELECT rowid, text FROM notes WHERE tenant_id = ? AND rowid > ? ORDER BY rowid LIMIT ?"
        last = 0
        while rows := self._select(query, last, batch):
            last = int(rows[-1][0])
            yield [(int(r[0]), str(r[1])) for r in rows]

    def count(self) -> int:
        rows = self._select("SELECT count(*) FROM notes WHERE tenant_id = ?")
        return int(rows[0][0]) if rows else 0

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None:
        """How many of the tenant's notes hold each term (FTS5 phrase count), and how many notes
        there are; `None` for a tenant with no notes. Cached per tenant until its next write."""
        with self._file.reading() as conn:
            state = self._state(conn)
            if state is None:
                return None
            tenant_id, generation = state
            fts = _fts_table(tenant_id)

            def documents() -> int:
                return int(
                    conn.execute("SELECT count(*) FROM notes WHERE tenant_id = ?", (tenant_id,)).fetchone()[0]
                )

            def count(missing: list[str]) -> list[int]:
                # A term no store can hold is in no note (PostgreSQL counts it as no word); each
                # other term is one FTS5 string, its quotes doubled.
                query = f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?"  # noqa: S608
                phrases = [
                    '"' + term.replace('"', '""') + '"' if storable(term) else None for term in missing
                ]
                return [0 if p is None else int(conn.execute(query, (p,)).fetchone()[0]) for p in phrases]

            return self._cache.document_frequencies(
                tenant_id, generation, terms, documents=documents, count=count
            )

    def lexical(self, match: str, where: NoteFilter, limit: int) -> list[LexicalHit]:
        """Best `limit` notes for an FTS5 `match` expression by BM25, after `where`."""
        return [LexicalHit(int(r[0]), float(r[1])) for r in self._fts(match, where, limit, ranked=True)]

    def matching(self, match: str, where: NoteFilter, limit: int) -> list[int]:
        """Row ids of up to `limit` notes matching an FTS5 `match` expression, after `where`, unranked.

        Why unranked: a caller that only needs to know which notes match (the all-terms lift)
        would pay for BM25 on every match; without `ORDER BY` FTS5 stops at `limit`.
        """
        return [int(r[0]) for r in self._fts(match, where, limit, ranked=False)]

    def _fts(self, match: str, where: NoteFilter, limit: int, *, ranked: bool) -> list[Any]:
        """(row id, and BM25 if `ranked`) of up to `limit` notes matching `match` after `where`.

        The FTS table is the tenant's own, so without filters no join with `notes` is needed
        (that join costs a row lookup per matching document).
        """
        checked_expression(match)
        extra, params = _filter(where)
        with self._file.reading() as conn:
            tenant_id = self._file.tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return []
            fts = _fts_table(tenant_id)
            score, order = (f", bm25({fts}, 1.0, 1.5, 1.5) AS s", " ORDER BY s") if ranked else ("", "")
            if extra:
                sql = (
                    f"SELECT f.rowid{score} FROM {fts} f JOIN notes n ON n.rowid = f.rowid "  # noqa: S608
                    f"WHERE {fts} MATCH ? AND +n.tenant_id = ?{extra}{order} LIMIT ?"
                )
                args: list[object] = [match, tenant_id, *params, limit]
            else:
                sql = f"SELECT rowid{score} FROM {fts} WHERE {fts} MATCH ?{order} LIMIT ?"  # noqa: S608
                args = [match, limit]
            return conn.execute(sql, args).fetchall()

    def identifier_matches(self, values: Sequence[str], where: NoteFilter) -> dict[int, list[str]]:
        """Notes with an identifier (normalised) in `values`: rowid -> the kinds:values matched."""
        values = [value for value in values if storable(value)]  # the others match no identifier
        if not values:
            return {}
        with self._file.reading() as conn:
            tenant_id = self._file.tenant_id(conn, self.tenant, create=False)
            if tenant_id is None:
                return {}
            extra, params = _filter(where)
            marks = ",".join("?" * len(values))
            sql = (
                "SELECT i.note_rowid, i.kind, i.value FROM note_identifiers i "  # noqa: S608
                "JOIN notes n ON n.rowid = i.note_rowid "
                f"WHERE i.tenant_id = ? AND +n.tenant_id = ? AND i.value IN ({marks}){extra}"
            )
            rows = conn.execute(sql, [tenant_id, tenant_id, *values, *params]).fetchall()
        return identifier_hits(rows)

    def lexical_half(
        self, match: str | None, every: str | None, identifiers: Sequence[str], where: NoteFilter, limit: int
    ) -> LexicalHalf:
        return LexicalHalf(
            [] if match is None else self.lexical(match, where, limit),
            [] if every is None else self.matching(every, where, limit),
            self.identifier_matches(identifiers, where),
        )

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]:
        """The notes with these row ids that belong to this tenant."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        query = f"SELECT rowid, doc, text FROM notes WHERE +tenant_id = ? AND rowid IN ({marks})"  # noqa: S608
        return {int(r[0]): note_from_row(r[1], r[2]) for r in self._select(query, *rowids)}

    def case_notes(self, case_id: str) -> list[CaseNote]:
        """All notes of one case of this tenant, oldest first (empty for unknown or foreign cases)."""
        if not storable(case_id):
            return []
        rows = self._select(
            "SELECT doc, text FROM notes WHERE tenant_id = ? AND case_id = ? ORDER BY created_ts, note_id",
            case_id,
        )
        return [note_from_row(r[0], r[1]) for r in rows]

    def case_ids(self) -> list[str]:
        rows = self._select("SELECT DISTINCT case_id FROM notes WHERE tenant_id = ? ORDER BY case_id")
        return [str(r[0]) for r in rows]

    def vectors(self) -> TenantVectors | None:
        """This tenant's note vectors, from memory unless a write has happened since they were loaded."""
        with self._file.reading() as conn:
            state = self._state(conn)
            if state is None:
                return None
            tenant_id, generation = state

            def load() -> tuple[int, str | None, list[VectorRow]]:
                space = conn.execute(
                    "SELECT space FROM tenant_vector_spaces WHERE tenant_id = ?", (tenant_id,)
                )
                rows = conn.execute(
                    "SELECT rowid, embedding, created_ts, case_id, typologies FROM notes "
                    "WHERE tenant_id = ? ORDER BY rowid",
                    (tenant_id,),
                ).fetchall()
                found = space.fetchone()  # the lock is held: nothing was written since
                return generation, None if found is None else str(found[0]), rows

            return self._cache.vectors(tenant_id, generation, load)


_CHUNK = 500  # values per `IN` list of a foreign-identifier probe


class SqliteIdentifierDirectory:
    """`ForeignIdentifiers` on the notes file: the store has no cross-tenant read, so this one
    question is answered through a read-only connection of its own (yes/no per value, no more)."""

    def __init__(self, notes_db: Path) -> None:
        self._path = notes_db

    def foreign(self, tenant: str, values: Collection[str]) -> set[str]:
        """Those of `values` (normalised) found in another tenant's notes and not in `tenant`'s own."""
        ordered = sorted(value for value in values if storable(value))  # no note holds the others
        if not ordered or not self._path.exists():
            return set()
        found: dict[bool, set[str]] = {True: set(), False: set()}  # by "in the caller's own notes"
        conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30)
        try:
            # Names compared here, not in SQL: a tenant no store holds (a lone surrogate) owns nothing.
            for tenant_id, name in conn.execute("SELECT tenant_id, name FROM tenants").fetchall():
                for start in range(0, len(ordered), _CHUNK):  # one indexed probe per tenant and chunk
                    chunk = ordered[start : start + _CHUNK]
                    sql = f"SELECT DISTINCT value FROM note_identifiers WHERE tenant_id = ? AND value IN ({','.join('?' * len(chunk))})"  # noqa: S608, E501
                    rows = conn.execute(sql, [tenant_id, *chunk]).fetchall()
                    found[name == tenant].update(str(row[0]) for row in rows)
        finally:
            conn.close()
        return found[False] - found[True]
