"""Case notes on PostgreSQL, shared by every replica: `PostgresNotes`, the `NotesBackend` of a
scaled-out server (`docs/scale-out.md`, "Notes on PostgreSQL", has the measurements).

Why this shape:

* **One LIST partition per bank** of `aml_notes` (`aml_notes_t<n>`, `n` an integer the store
  mints, never caller text): a bank's lexical query is pruned to its own partition, its GIN index
  and planner statistics are its own, and offboarding a bank is a `DROP TABLE`. Every statement
  still filters on `tenant_id`, and the only way in is `tenant(<validated tenant>)`.
* **Full text**: a generated `tsvector` (`english`) over the text (weight B) and the subjects and
  identifiers (weight A, 1.5 times the text's, as SQLite weights its BM25 columns). Its GIN index
  has `fastupdate = off` and every write `ANALYZE`s the bank's partition: otherwise, after a bulk
  ingest, the planner picks a sequential scan that parses every note's tsvector (30 times slower).
* **Ranking** is `ts_rank_cd`, which is **not BM25** (no inverse document frequency, no length
  saturation): scores, and often the lexical order, differ from SQLite's (`LexicalHit.bm25` here is
  `-ts_rank_cd`, so lower still means better). Fusion is by rank; tune the hybrid per backend
  before comparing quality figures.
* **Identifiers** and **vectors** as in SQLite (`notes.storage`): `aml_note_identifiers`, and a
  float16 `bytea` per note; each replica checks its bank's `generation` (one small query per
  search) and reloads the matrix when it moved.
* **Writes** of a bank hold a transaction-scoped advisory lock on (`LockClass.NOTES_TENANT`, the
  bank), so two replicas ingesting into one bank, or creating its partition, take turns.
* **A blocking pool** (`SyncPostgres`), not the app's async one: the notes API runs in worker
  threads and in commands with no event loop (`ingest`, `reembed`, the demo load before the server
  starts). It holds at most `max_connections` (4) more connections per process.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, LiteralString

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql
from psycopg.abc import QueryNoTemplate
from psycopg_pool import PoolTimeout

from aml_mcp.aml.notes.cache import GenerationCache
from aml_mcp.aml.notes.model import (
    STORED_COLUMNS,
    CaseNote,
    LexicalHit,
    NoteFilter,
    NotesUnavailableError,
    TenantVectors,
    TermStatistics,
    VectorSpaceMismatchError,
    identifier_hits,
    note_from_row,
    refuse_unstorable_space,
    stored_notes,
    validate_tenant,
)
from aml_mcp.aml.notes.storage import expression_terms
from aml_mcp.aml.notes.vectors import VectorRow
from aml_mcp.store.locks import AdvisoryLock, LockClass
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase, storage_fault
from aml_mcp.store.postgres_sync import SyncPostgres
from aml_mcp.store.text import storable

COMPONENT = "aml_notes"
MIGRATION = Migration(
    COMPONENT,
    [
        """
        CREATE TABLE aml_note_tenants (
            tenant_id   INTEGER GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name        TEXT NOT NULL UNIQUE,
            generation  BIGINT NOT NULL DEFAULT 0,
            space       TEXT
        );
        CREATE SEQUENCE aml_note_rowids;
        CREATE TABLE aml_notes (
            tenant_id    INTEGER NOT NULL,
            rowid        BIGINT NOT NULL DEFAULT nextval('aml_note_rowids'),
            note_id      TEXT NOT NULL,
            case_id      TEXT NOT NULL,
            created_ts   DOUBLE PRECISION NOT NULL,
            typologies   TEXT NOT NULL,
            text         TEXT NOT NULL,
            subjects     TEXT NOT NULL,
            identifiers  TEXT NOT NULL,
            doc          TEXT NOT NULL,
            embedding    BYTEA NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('english'::regconfig, text), 'B')
                || setweight(to_tsvector('english'::regconfig, subjects), 'A')
                || setweight(to_tsvector('english'::regconfig, identifiers), 'A')
            ) STORED,
            PRIMARY KEY (tenant_id, rowid),
            UNIQUE (tenant_id, note_id)
        ) PARTITION BY LIST (tenant_id);
        CREATE INDEX aml_notes_tsv ON aml_notes USING GIN (tsv) WITH (fastupdate = off);
        CREATE INDEX aml_notes_case ON aml_notes (tenant_id, case_id);
        CREATE TABLE aml_note_identifiers (
            tenant_id   INTEGER NOT NULL,
            value       TEXT NOT NULL,
            kind        TEXT NOT NULL,
            note_rowid  BIGINT NOT NULL
        );
        CREATE INDEX aml_note_identifiers_lookup ON aml_note_identifiers (tenant_id, value);
        CREATE INDEX aml_note_identifiers_note ON aml_note_identifiers (tenant_id, note_rowid);
        """,
    ],
)


_RANK_WEIGHTS = "{0.1, 0.2, 0.67, 1.0}"
"""`ts_rank_cd` weights for D, C, B, A: the text (B) counts 2/3 of the subjects and identifiers (A)."""
_CONFIG: LiteralString = "'english'::regconfig"


def _tsquery(operator: str, count: int) -> sql.Composable:
    """`count` words, each through `plainto_tsquery`, joined by `operator` (`AND` or `OR`) as `&&` or
    `||`, the grammar `notes.storage` defines translated. A word `english` drops as a stop word
    yields an empty query, which `||` and `&&` ignore."""
    joiner = sql.SQL(" && ") if operator == "AND" else sql.SQL(" || ")
    one = sql.SQL("plainto_tsquery(" + _CONFIG + ", %s)")
    return sql.SQL("(") + joiner.join([one] * count) + sql.SQL(")")


def _filter(where: NoteFilter) -> tuple[sql.Composable, list[object]]:
    """`where` as a SQL fragment (starting with `AND`, or empty) over table alias `n`, and its
    parameters (the SQLite store writes the same filter with `?` placeholders)."""
    clauses: list[sql.Composable] = []
    params: list[object] = []
    if where.date_from_ts is not None:
        clauses.append(sql.SQL("n.created_ts >= %s"))
        params.append(where.date_from_ts)
    if where.date_to_ts is not None:
        clauses.append(sql.SQL("n.created_ts <= %s"))
        params.append(where.date_to_ts)
    # A value `TEXT` cannot hold can equal no stored value: the filter matches nothing.
    if where.case_id is not None:
        if storable(where.case_id):
            clauses.append(sql.SQL("n.case_id = %s"))
            params.append(where.case_id)
        else:
            clauses.append(sql.SQL("FALSE"))
    if where.typology is not None:
        if storable(where.typology):
            clauses.append(sql.SQL("strpos(n.typologies, %s) > 0"))
            params.append(f"|{where.typology}|")
        else:
            clauses.append(sql.SQL("FALSE"))
    return sql.SQL("").join(sql.SQL(" AND ") + c for c in clauses), params


class _Banks:
    """The pool and the banks' integer ids: what the store, its bank views and the identifier
    directory share."""

    def __init__(self, pool: SyncPostgres) -> None:
        self.pool = pool
        self.open = False
        self._lock = threading.Lock()
        self._ids: dict[str, int] = {}

    @contextlib.contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit); storage faults become `NotesUnavailableError`."""
        if not self.open:
            raise RuntimeError("the notes store is not open")
        try:
            with self.pool.connection() as conn:
                yield conn
        except (psycopg.Error, PoolTimeout) as exc:
            cause = storage_fault(exc)
            if cause is None:
                raise
            raise NotesUnavailableError(cause) from exc

    def tenant_id(self, conn: psycopg.Connection[Any], tenant: str) -> int | None:
        """The bank's integer id (cached: ids never change), or None before its first write."""
        with self._lock:
            known = self._ids.get(tenant)
        if known is not None:
            return known
        row = conn.execute("SELECT tenant_id FROM aml_note_tenants WHERE name = %s", (tenant,)).fetchone()
        if row is None:
            return None
        with self._lock:
            self._ids[tenant] = int(row[0])
        return int(row[0])

    @staticmethod
    def state(conn: psycopg.Connection[Any], tenant: str) -> tuple[int, int] | None:
        """(tenant id, generation) now, or None before the bank's first write."""
        row = conn.execute(
            "SELECT tenant_id, generation FROM aml_note_tenants WHERE name = %s", (tenant,)
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    @staticmethod
    def writing(conn: psycopg.Connection[Any], tenant: str, *, create: bool) -> int | None:
        """Inside a transaction: take the bank's write lock; its id (partition made if `create`)."""
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LockClass.NOTES_TENANT, tenant))
        row = conn.execute("SELECT tenant_id FROM aml_note_tenants WHERE name = %s", (tenant,)).fetchone()
        if row is not None:
            return int(row[0])
        if not create:
            return None
        created = conn.execute(
            "INSERT INTO aml_note_tenants (name) VALUES (%s) RETURNING tenant_id", (tenant,)
        ).fetchone()
        assert created is not None
        tenant_id = int(created[0])
        conn.execute(
            sql.SQL("CREATE TABLE {} PARTITION OF aml_notes FOR VALUES IN ({})").format(
                sql.Identifier(f"aml_notes_t{tenant_id}"), sql.Literal(tenant_id)
            )
        )
        return tenant_id


class PostgresNotes:
    """Every bank's notes in one PostgreSQL schema (a partition each); thread-safe."""

    def __init__(self, database: PostgresDatabase, *, max_connections: int = 4) -> None:
        self.database = database
        # At least two: the first-load lock holds one for the whole load.
        pool = SyncPostgres(database, name="aml-mcp-notes", max_size=max(2, max_connections))
        self._banks = _Banks(pool)
        self._cache = GenerationCache()

    # -- lifetime -------------------------------------------------------------------------------

    def open(self) -> PostgresNotes:
        """Connect, create the schema if asked for one, and bring the tables up to date."""
        if not self._banks.open:
            self._banks.pool.open()
            self._banks.open = True  # so that `close` closes it, even if the migration fails
            self._banks.pool.apply(MIGRATION)
        return self

    def close(self) -> None:
        if self._banks.open:
            self._banks.open = False
            self._banks.pool.close()

    def __enter__(self) -> PostgresNotes:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connection(self) -> contextlib.AbstractContextManager[psycopg.Connection[Any]]:
        """A pooled connection (autocommit) on the notes' schema; storage faults become
        `NotesUnavailableError` (for the identifier directory, which reads across banks)."""
        return self._banks.connection()

    # -- NotesBackend ---------------------------------------------------------------------------

    @property
    def damage(self) -> str | None:
        """Always None: page damage is the database server's to detect and repair, not ours."""
        return None

    def verify(self) -> str | None:
        return None

    def probe(self) -> str | None:
        """Why the shared notes cannot be read (one short cause), or None."""
        try:
            with self._banks.connection() as conn:
                conn.execute("SELECT 1 FROM aml_note_tenants LIMIT 1")
        except NotesUnavailableError as exc:
            return str(exc)
        return None

    def tenant(self, tenant: str) -> PostgresTenantNotes:
        """The notes of one tenant: the only way to read or write notes."""
        return PostgresTenantNotes(self._banks, self._cache, validate_tenant(tenant))

    def tenants(self) -> list[str]:
        with self._banks.connection() as conn:
            rows = conn.execute("SELECT name FROM aml_note_tenants ORDER BY name").fetchall()
        return [str(r[0]) for r in rows]

    @contextlib.contextmanager
    def first_load(self) -> Iterator[None]:
        """A session advisory lock for the demo load: replicas starting together load it once
        (the others wait here, then find the banks present and load nothing)."""
        with self._banks.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (AdvisoryLock.NOTES_FIRST_LOAD,))
            try:
                yield
            finally:
                if not conn.closed:
                    conn.execute("SELECT pg_advisory_unlock(%s)", (AdvisoryLock.NOTES_FIRST_LOAD,))

    @contextlib.contextmanager
    def moving(self, tenant: str) -> Iterator[bool]:
        """Try to take the bank's move lock (never waits): True while this replica re-embeds it,
        False when another one does. Held on one pooled connection for the whole move; a replica
        that dies releases it with its connection."""
        validate_tenant(tenant)
        with self._banks.connection() as conn:
            row = conn.execute(
                "SELECT pg_try_advisory_lock(%s, hashtext(%s))", (LockClass.NOTES_MOVE, tenant)
            ).fetchone()
            mine = bool(row is not None and row[0])
            try:
                yield mine
            finally:
                if mine and not conn.closed:
                    conn.execute(
                        "SELECT pg_advisory_unlock(%s, hashtext(%s))", (LockClass.NOTES_MOVE, tenant)
                    )


class PostgresTenantNotes:
    """One bank's notes on PostgreSQL: the `TenantNoteAccess` of `PostgresNotes`."""

    def __init__(self, banks: _Banks, cache: GenerationCache, tenant: str) -> None:
        self._banks = banks
        self._cache = cache
        self.tenant = tenant

    # -- writes ---------------------------------------------------------------------------------

    def replace_notes(
        self, notes: Sequence[CaseNote], embeddings: npt.NDArray[np.float32], *, space: str
    ) -> int:
        """Insert or replace `notes` with their `embeddings` in one transaction, refusing the whole
        batch as SQLite does (`stored_notes`). Returns how many notes replaced an existing note id
        (a note id repeated within the batch counts as replacing its earlier copy, as in SQLite).
        """
        prepared = stored_notes(notes, embeddings, space=space)
        latest = {row.note.note_id: position for position, row in enumerate(prepared)}
        kept = [prepared[position] for position in sorted(latest.values())]
        with self._banks.connection() as conn, conn.transaction():
            tenant_id = self._banks.writing(conn, self.tenant, create=True)
            assert tenant_id is not None
            current = conn.execute(
                "SELECT space FROM aml_note_tenants WHERE tenant_id = %s", (tenant_id,)
            ).fetchone()
            if current is not None and current[0] is not None and current[0] != space:
                raise VectorSpaceMismatchError(self.tenant, str(current[0]), space)
            old = conn.execute(
                "DELETE FROM aml_notes WHERE tenant_id = %s AND note_id = ANY(%s) RETURNING rowid",
                (tenant_id, list(latest)),
            ).fetchall()
            if old:
                conn.execute(
                    "DELETE FROM aml_note_identifiers WHERE tenant_id = %s AND note_rowid = ANY(%s)",
                    (tenant_id, [int(r[0]) for r in old]),
                )
            fresh = conn.execute(
                "SELECT nextval('aml_note_rowids') FROM generate_series(1, %s)", (len(kept),)
            )
            rowids = [int(r[0]) for r in fresh.fetchall()]
            with conn.cursor() as cur:
                with cur.copy("COPY aml_notes (tenant_id, rowid, " + STORED_COLUMNS + ") FROM STDIN") as copy:
                    for rowid, row in zip(rowids, kept, strict=True):
                        copy.write_row((tenant_id, rowid, *row.values()))
                with cur.copy(
                    "COPY aml_note_identifiers (tenant_id, value, kind, note_rowid) FROM STDIN"
                ) as copy:
                    for rowid, row in zip(rowids, kept, strict=True):
                        for value, kind in row.identifier_rows:
                            copy.write_row((tenant_id, value, kind, rowid))
            conn.execute(
                "UPDATE aml_note_tenants SET generation = generation + 1, space = %s WHERE tenant_id = %s",
                (space, tenant_id),
            )
            # Fresh statistics for the partition, as SQLite's `PRAGMA optimize` (measured 13 ms
            # against 0.4 ms per query at 2,000 notes without them).
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(f"aml_notes_t{tenant_id}")))
        return len(old) + len(notes) - len(latest)

    def replace_vectors(
        self,
        vectors: Sequence[tuple[int, npt.NDArray[np.float32]]],
        *,
        space: str,
        generation: int | None = None,
    ) -> None:
        """Swap every note vector of this bank for one made in `space`, in one transaction."""
        refuse_unstorable_space(space)
        with self._banks.connection() as conn, conn.transaction():
            tenant_id = self._banks.writing(conn, self.tenant, create=False)
            if tenant_id is None:
                return
            state = self._banks.state(conn, self.tenant)
            if generation is not None and (state is None or state[1] != generation):
                raise ValueError("the tenant's notes changed while its vectors were computed")
            total = conn.execute(
                "SELECT count(*) FROM aml_notes WHERE tenant_id = %s", (tenant_id,)
            ).fetchone()
            if total is None or int(total[0]) != len(vectors):
                raise ValueError("replace_vectors needs a vector for every note of the tenant")
            conn.execute(
                "CREATE TEMPORARY TABLE aml_new_vectors (rowid BIGINT, embedding BYTEA) ON COMMIT DROP"
            )
            with conn.cursor() as cur, cur.copy("COPY aml_new_vectors (rowid, embedding) FROM STDIN") as copy:
                for rowid, vector in vectors:
                    copy.write_row((rowid, np.ascontiguousarray(vector, dtype=np.float16).tobytes()))
            updated = conn.execute(
                "UPDATE aml_notes n SET embedding = v.embedding FROM aml_new_vectors v "
                "WHERE n.tenant_id = %s AND n.rowid = v.rowid",
                (tenant_id,),
            ).rowcount
            if updated != len(vectors):
                raise ValueError("replace_vectors needs a vector for every note of the tenant")
            conn.execute(
                "UPDATE aml_note_tenants SET generation = generation + 1, space = %s WHERE tenant_id = %s",
                (space, tenant_id),
            )

    # -- reads ----------------------------------------------------------------------------------

    def vector_space(self) -> str | None:
        rows = self._rows("SELECT space FROM aml_note_tenants WHERE tenant_id = %s")
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def generation(self) -> int:
        with self._banks.connection() as conn:
            state = self._banks.state(conn, self.tenant)
        return 0 if state is None else state[1]

    def _rows(
        self, query: QueryNoTemplate, params: Callable[[int], Sequence[object]] = lambda bank: (bank,)
    ) -> list[tuple[Any, ...]]:
        """The rows of `query` with the parameters `params(<the bank's id>)`; none before the bank's
        first write."""
        with self._banks.connection() as conn:
            tenant_id = self._banks.tenant_id(conn, self.tenant)
            return [] if tenant_id is None else conn.execute(query, params(tenant_id)).fetchall()

    def iter_texts(self, batch: int = 2000) -> Iterator[list[tuple[int, str]]]:
        """(row id, text) of every note in row order, `batch` rows at a time; a connection per
        batch, so a slow consumer holds none while it works."""
        query: LiteralString = (
            "SELECT rowid, text FROM aml_notes WHERE tenant_id = %s AND rowid > %s ORDER BY rowid LIMIT %s"
        )
        after = 0
        while rows := self._rows(query, lambda bank: (bank, after, batch)):  # noqa: B023 - called at once
            after = int(rows[-1][0])
            yield [(int(r[0]), str(r[1])) for r in rows]

    def count(self) -> int:
        rows = self._rows("SELECT count(*) FROM aml_notes WHERE tenant_id = %s")
        return int(rows[0][0]) if rows else 0

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None:
        """How many of the bank's notes match each term (as `plainto_tsquery`), and how many notes
        there are; None for a bank with no notes. Cached per bank until its next write."""
        with self._banks.connection() as conn:
            state = self._banks.state(conn, self.tenant)
            if state is None:
                return None
            tenant_id, generation = state

            def documents() -> int:
                row = conn.execute(
                    "SELECT count(*) FROM aml_notes WHERE tenant_id = %s", (tenant_id,)
                ).fetchone()
                return 0 if row is None else int(row[0])

            def count(missing: list[str]) -> list[int]:
                counted = conn.execute(
                    "SELECT t, (SELECT count(*) FROM aml_notes WHERE tenant_id = %s"
                    " AND tsv @@ plainto_tsquery('english'::regconfig, t)) FROM unnest(%s::text[]) AS t",
                    (tenant_id, [t if storable(t) else "" for t in missing]),
                ).fetchall()
                return [int(df) for _, df in counted]

            return self._cache.document_frequencies(
                tenant_id, generation, terms, documents=documents, count=count
            )

    def lexical(self, match: str, where: NoteFilter, limit: int) -> list[LexicalHit]:
        """Best `limit` notes for a lexical expression by `ts_rank_cd` (not BM25), after `where`."""
        operator, terms = expression_terms(match)
        extra, params = _filter(where)
        query = (
            sql.SQL("SELECT n.rowid, ts_rank_cd(%s::float4[], n.tsv, q.q) AS s FROM aml_notes n, (SELECT ")
            + _tsquery(operator, len(terms))
            + sql.SQL(" AS q) q WHERE n.tenant_id = %s AND n.tsv @@ q.q")
            + extra
            + sql.SQL(" ORDER BY s DESC, n.rowid LIMIT %s")
        )
        rows = self._rows(query, lambda bank: [_RANK_WEIGHTS, *terms, bank, *params, limit])
        return [LexicalHit(int(r[0]), -float(r[1])) for r in rows]

    def matching(self, match: str, where: NoteFilter, limit: int) -> list[int]:
        """Row ids of up to `limit` notes matching a lexical expression, after `where`, unranked."""
        operator, terms = expression_terms(match)
        extra, params = _filter(where)
        query = (
            sql.SQL("SELECT n.rowid FROM aml_notes n WHERE n.tenant_id = %s AND n.tsv @@ ")
            + _tsquery(operator, len(terms))
            + extra
            + sql.SQL(" LIMIT %s")
        )
        return [int(r[0]) for r in self._rows(query, lambda bank: [bank, *terms, *params, limit])]

    def identifier_matches(self, values: Sequence[str], where: NoteFilter) -> dict[int, list[str]]:
        wanted = [v for v in values if storable(v)]
        if not wanted:
            return {}
        extra, params = _filter(where)
        query = (
            sql.SQL(
                "SELECT i.note_rowid, i.kind, i.value FROM aml_note_identifiers i "
                "JOIN aml_notes n ON n.tenant_id = i.tenant_id AND n.rowid = i.note_rowid "
                "WHERE i.tenant_id = %s AND n.tenant_id = %s AND i.value = ANY(%s)"
            )
            + extra
        )
        return identifier_hits(self._rows(query, lambda bank: [bank, bank, wanted, *params]))

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]:
        if not rowids:
            return {}
        rows = self._rows(
            "SELECT rowid, doc, text FROM aml_notes WHERE tenant_id = %s AND rowid = ANY(%s)",
            lambda bank: (bank, [int(r) for r in rowids]),
        )
        return {int(r[0]): note_from_row(r[1], r[2]) for r in rows}

    def case_notes(self, case_id: str) -> list[CaseNote]:
        if not storable(case_id):
            return []
        rows = self._rows(
            "SELECT doc, text FROM aml_notes WHERE tenant_id = %s AND case_id = %s "
            'ORDER BY created_ts, note_id COLLATE "C"',
            lambda bank: (bank, case_id),
        )
        return [note_from_row(r[0], r[1]) for r in rows]

    def case_ids(self) -> list[str]:
        rows = self._rows(
            'SELECT DISTINCT case_id COLLATE "C" AS c FROM aml_notes WHERE tenant_id = %s ORDER BY c'
        )
        return [str(r[0]) for r in rows]

    def vectors(self) -> TenantVectors | None:
        """This bank's vectors, from this replica's memory unless the bank's generation moved."""
        with self._banks.connection() as conn:
            state = self._banks.state(conn, self.tenant)
            if state is None:
                return None
            tenant_id, generation = state

            def load() -> tuple[int, list[VectorRow]]:
                with conn.transaction():
                    # Generation and rows read in one snapshot, so the matrix is the generation's own.
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    now = self._banks.state(conn, self.tenant)
                    assert now is not None
                    rows = conn.execute(
                        "SELECT rowid, embedding, created_ts, case_id, typologies FROM aml_notes "
                        "WHERE tenant_id = %s ORDER BY rowid",
                        (tenant_id,),
                    ).fetchall()
                return now[1], [(int(r[0]), bytes(r[1]), float(r[2]), str(r[3]), str(r[4])) for r in rows]

            return self._cache.vectors(tenant_id, generation, load)


class PostgresIdentifierDirectory:
    """`ForeignIdentifiers` on the shared notes: which candidate values only other banks hold."""

    def __init__(self, store: PostgresNotes) -> None:
        self._store = store

    def foreign(self, tenant: str, values: Collection[str]) -> set[str]:
        wanted = sorted(v for v in values if storable(v))
        if not wanted:
            return set()
        if not storable(tenant):  # no bank is called that, so it has no notes: every bank is another
            with self._store.connection() as conn:
                rows = conn.execute(
                    "SELECT DISTINCT value FROM aml_note_identifiers WHERE value = ANY(%s)", (wanted,)
                ).fetchall()
            return {str(r[0]) for r in rows}
        with self._store.connection() as conn:
            rows = conn.execute(
                "SELECT DISTINCT i.value FROM aml_note_identifiers i "
                "JOIN aml_note_tenants t ON t.tenant_id = i.tenant_id "
                "WHERE t.name <> %s AND i.value = ANY(%s) "
                "AND NOT EXISTS (SELECT 1 FROM aml_note_identifiers o JOIN aml_note_tenants ot "
                "ON ot.tenant_id = o.tenant_id WHERE ot.name = %s AND o.value = i.value)",
                (tenant, wanted, tenant),
            ).fetchall()
        return {str(r[0]) for r in rows}
