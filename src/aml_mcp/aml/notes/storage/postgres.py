"""Case notes on PostgreSQL, shared by every replica: `PostgresNotes`, the `NotesBackend` of a
scaled-out server (`docs/scale-out.md`, "Notes on PostgreSQL", has the measurements).

Why this shape:

* **One LIST partition per bank** of `aml_notes` (`aml_notes_t<n>`, `n` an integer the store
  mints, never caller text): a bank's lexical query is pruned to its own partition, its GIN index
  and planner statistics are its own, and offboarding a bank is a `DROP TABLE`. Every statement
  still filters on `tenant_id`, and the only way in is `tenant(<validated tenant>)`.
* **Full text**: a generated `tsvector` (`english`, punctuation split as FTS5 splits it) over the
  text (weight B) and the subjects and identifiers (weight A, 1.5 times the text's, as SQLite
  weights its BM25 columns). Its GIN index
  has `fastupdate = off` and every write `ANALYZE`s the bank's partition: otherwise, after a bulk
  ingest, the planner picks a sequential scan that parses every note's tsvector (30 times slower).
* **Ranking** is BM25 as SQLite's FTS5 computes it (`notes.bm25`, the statements in
  `postgres_bm25.py`), from statistics every write keeps: each bank's note and token counts and each
  word's document frequency and bounds (`aml_note_terms`). Only a plan's candidates are scored, so
  a search costs what its words cost, not what the bank holds.
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
from collections.abc import Callable, Collection, Iterator, Sequence
from typing import Any, LiteralString, cast

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from aml_mcp.aml.notes.bm25 import BankTotals, TermStats
from aml_mcp.aml.notes.cache import GenerationCache
from aml_mcp.aml.notes.model import (
    STORED_COLUMNS,
    CaseNote,
    LexicalHalf,
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
from aml_mcp.aml.notes.storage.postgres_banks import PostgresBanks
from aml_mcp.aml.notes.storage.postgres_bm25 import (
    STATISTICS,
    TERM_FREQUENCY,
    Known,
    identifier_lookup,
    matching,
    partition,
    ranking,
)
from aml_mcp.aml.notes.vectors import VectorRow
from aml_mcp.store.locks import AdvisoryLock, LockClass
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.postgres_sync import SyncPostgres
from aml_mcp.store.text import storable

COMPONENT = "aml_notes"


_DELETE_NOTES: LiteralString = (
    "WITH gone AS (DELETE FROM aml_notes WHERE tenant_id = %s AND note_id = ANY(%s)"
    " RETURNING rowid, length, lexemes),"
    " words AS (SELECT u.lexeme, count(*) AS n FROM gone, unnest(gone.lexemes) u GROUP BY u.lexeme),"
    " uncounted AS (UPDATE aml_note_terms t SET df = t.df - w.n FROM words w"
    " WHERE t.tenant_id = %s AND t.lexeme = w.lexeme)"
    " SELECT rowid, length FROM gone"
)
"""Delete a bank's notes by note id and take their words out of its document frequencies (a word's
bounds stay: a bound kept after a deletion is still a bound)."""
_COUNT_NOTES: LiteralString = (
    "WITH fresh AS MATERIALIZED (SELECT length, lexemes FROM aml_notes"  # noqa: S608
    " WHERE tenant_id = %(bank)s AND rowid = ANY(%(rows)s)),"
    " counted AS (INSERT INTO aml_note_terms (tenant_id, lexeme, df, max_tf, min_length)"
    " SELECT %(bank)s, u.lexeme, count(*), max(" + TERM_FREQUENCY + "), min(f.length)"
    " FROM fresh f, unnest(f.lexemes) u GROUP BY u.lexeme"
    " ON CONFLICT (tenant_id, lexeme) DO UPDATE SET df = aml_note_terms.df + excluded.df,"
    " max_tf = greatest(aml_note_terms.max_tf, excluded.max_tf),"
    " min_length = least(aml_note_terms.min_length, excluded.min_length))"
    " UPDATE aml_note_tenants SET generation = generation + 1, space = %(space)s,"
    " notes = notes - %(gone)s + (SELECT count(*) FROM fresh),"
    " tokens = tokens - %(gone_tokens)s + (SELECT coalesce(sum(length), 0) FROM fresh)"
    " WHERE tenant_id = %(bank)s"
)
"""Count freshly written notes (`rows`) into their bank's totals and words, move its generation."""
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
        # BM25 (bm25.py): words split as FTS5 splits them (ASCII punctuation is a separator, so
        # "7169-967-77011" is three words, not "7169", "-967", "-77011"), kept inline (a TOASTed
        # tsvector costs a lookup per read), each note's length in tokens, and per bank its totals
        # and each word's document frequency and bounds, kept by every write.
        r"""
        ALTER TABLE aml_notes
            ADD COLUMN length INTEGER GENERATED ALWAYS AS (
                regexp_count(text || ' ' || subjects || ' ' || identifiers, '[^[:space:][:punct:][:cntrl:]]+')
            ) STORED,
            ADD COLUMN lexemes tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('english'::regconfig,
                    translate(text, $p$!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~$p$, repeat(' ', 32))), 'B')
                || setweight(to_tsvector('english'::regconfig,
                    translate(subjects, $p$!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~$p$, repeat(' ', 32))), 'A')
                || setweight(to_tsvector('english'::regconfig,
                    translate(identifiers, $p$!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~$p$, repeat(' ', 32))), 'A')
            ) STORED,
            ALTER COLUMN lexemes SET STORAGE MAIN;
        DROP INDEX aml_notes_tsv;
        ALTER TABLE aml_notes DROP COLUMN tsv;
        CREATE INDEX aml_notes_lexemes ON aml_notes USING GIN (lexemes) WITH (fastupdate = off);
        ALTER TABLE aml_note_tenants ADD COLUMN notes BIGINT NOT NULL DEFAULT 0,
            ADD COLUMN tokens BIGINT NOT NULL DEFAULT 0;
        UPDATE aml_note_tenants t SET notes = s.notes, tokens = s.tokens FROM (
            SELECT tenant_id, count(*) AS notes, sum(length) AS tokens FROM aml_notes GROUP BY tenant_id
        ) s WHERE s.tenant_id = t.tenant_id;
        CREATE TABLE aml_note_terms (
            tenant_id   INTEGER NOT NULL,
            lexeme      TEXT NOT NULL,
            df          INTEGER NOT NULL,
            max_tf      REAL NOT NULL,
            min_length  INTEGER NOT NULL,
            PRIMARY KEY (tenant_id, lexeme)
        );
        INSERT INTO aml_note_terms SELECT n.tenant_id, u.lexeme, count(*),
                max(cardinality(u.weights) + 0.5 * cardinality(array_positions(u.weights, 'A'))),
                min(n.length)
            FROM aml_notes n, unnest(n.lexemes) u GROUP BY n.tenant_id, u.lexeme;
        """,
    ],
)


class PostgresNotes:
    """Every bank's notes in one PostgreSQL schema (a partition each); thread-safe."""

    def __init__(self, database: PostgresDatabase, *, max_connections: int = 4) -> None:
        self.database = database
        # At least two: the first-load lock holds one for the whole load.
        pool = SyncPostgres(database, name="aml-mcp-notes", max_size=max(2, max_connections))
        self._banks = PostgresBanks(pool)
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

    def __init__(self, banks: PostgresBanks, cache: GenerationCache, tenant: str) -> None:
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
            old = conn.execute(_DELETE_NOTES, (tenant_id, list(latest), tenant_id)).fetchall()
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
            gone = {"gone": len(old), "gone_tokens": sum(int(r[1]) for r in old)}
            conn.execute(_COUNT_NOTES, {"bank": tenant_id, "rows": rowids, "space": space, **gone})
            # Fresh statistics for the partition, as SQLite's `PRAGMA optimize` (measured 13 ms
            # against 0.4 ms per query at 2,000 notes without them).
            conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(partition(tenant_id))))
        self._banks.forget(tenant_id)
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
        self._banks.forget(tenant_id)

    # -- reads ----------------------------------------------------------------------------------

    def vector_space(self) -> str | None:
        rows = self._rows("SELECT space FROM aml_note_tenants WHERE tenant_id = %s")
        return None if not rows or rows[0][0] is None else str(rows[0][0])

    def generation(self) -> int:
        with self._banks.connection() as conn:
            state = self._banks.state(conn, self.tenant)
        return 0 if state is None else state[1]

    def _rows(
        self, query: str, params: Callable[[int], Sequence[object]] = lambda bank: (bank,)
    ) -> list[tuple[Any, ...]]:
        """The rows of `query` with the parameters `params(<the bank's id>)`, `{notes}` naming the
        bank's own partition (planned without pruning: 0.1 ms less a statement); none before the
        bank's first write."""
        with self._banks.connection() as conn:
            tenant_id = self._banks.tenant_id(conn, self.tenant)
            if tenant_id is None:
                return []
            return conn.execute(query.replace("{notes}", partition(tenant_id)), params(tenant_id)).fetchall()

    def iter_texts(self, batch: int = 2000) -> Iterator[list[tuple[int, str]]]:
        """(row id, text) of every note in row order, `batch` rows at a time; a connection per
        batch, so a slow consumer holds none while it works."""
        query: LiteralString = (
            "SELECT rowid, text FROM {notes} WHERE tenant_id = %s AND rowid > %s ORDER BY rowid LIMIT %s"
        )
        after = 0
        while rows := self._rows(query, lambda bank: (bank, after, batch)):  # noqa: B023 - called at once
            after = int(rows[-1][0])
            yield [(int(r[0]), str(r[1])) for r in rows]

    def count(self) -> int:
        rows = self._rows("SELECT count(*) FROM {notes} WHERE tenant_id = %s")
        return int(rows[0][0]) if rows else 0

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None:
        """How many of the bank's notes hold each term (its lexeme, as `plainto_tsquery` makes it),
        and how many notes there are, from the statistics every write keeps; None before the bank's
        first write."""
        known = self._remembered(terms)
        if known is None or self._banks.lately(known[1]) != known[0]:
            with self._banks.connection() as conn:
                known = self._statistics(conn, terms)
        if known is None:
            return None
        return TermStatistics(known[2].documents, {term: known[3][term].df for term in terms})

    def _statistics(self, conn: psycopg.Connection[Any], terms: Sequence[str]) -> Known | None:
        """The bank's generation, id, totals and each term's statistics now, remembered with that
        generation (one query, or a look at the generation when it is the remembered one's); None
        before the bank's first write."""
        remembered = self._remembered(terms)
        if remembered is not None:
            now = conn.execute(
                "SELECT generation FROM aml_note_tenants WHERE tenant_id = %s", remembered[1:2]
            )
            if (now.fetchone() or (None,))[0] == remembered[0]:
                self._banks.saw(remembered[1], remembered[0])
                return remembered
        words = [term if storable(term) else "" for term in terms]  # the others are no word at all
        rows = conn.execute(STATISTICS, (words, self.tenant)).fetchall()
        if not rows:
            return None
        generation, tenant_id = int(rows[0][1]), self._banks.remember(self.tenant, int(rows[0][0]))
        self._banks.saw(tenant_id, generation)
        found = {term: TermStats(int(r[4] or 0), r[5], r[6]) for term, r in zip(terms, rows, strict=False)}
        totals, stats = self._cache.term_statistics(
            tenant_id,
            generation,
            terms,
            totals=lambda: BankTotals(int(rows[0][2]), int(rows[0][3])),
            count=lambda missing: [found[term] for term in missing],
        )
        return generation, tenant_id, totals, stats

    def _remembered(self, terms: Sequence[str]) -> Known | None:
        """What this replica last read of the bank's statistics, if it read every one of `terms`
        then (whether the bank is still at that generation is the caller's to check)."""
        tenant_id = self._banks.known(self.tenant)
        found = None if tenant_id is None else self._cache.remembered(tenant_id, terms)
        if tenant_id is None or found is None:
            return None
        return found[0], tenant_id, cast(BankTotals, found[1]), cast(dict[str, TermStats], found[2])

    def lexical(self, match: str, where: NoteFilter, limit: int) -> list[LexicalHit]:
        """Best `limit` notes for a lexical expression by BM25 as SQLite computes it (`bm25`), after
        `where`: exact for every note scoring at least the plan's threshold (for all of them when
        the words' notes fit `CANDIDATE_BUDGET`), then other scored notes holding its best word."""
        return self.lexical_half(match, None, (), where, limit).hits

    def matching(self, match: str, where: NoteFilter, limit: int) -> list[int]:
        """Row ids of up to `limit` notes matching a lexical expression, after `where`, unranked."""
        return self.lexical_half(None, match, (), where, limit).every

    def identifier_matches(self, values: Sequence[str], where: NoteFilter) -> dict[int, list[str]]:
        return self.lexical_half(None, None, values, where, 0).identifiers

    def lexical_half(
        self, match: str | None, every: str | None, identifiers: Sequence[str], where: NoteFilter, limit: int
    ) -> LexicalHalf:
        """`lexical`, `matching` and `identifier_matches` in one pipeline: one round trip when the
        words' statistics are remembered (the search just counted them). The ranking statement
        answers the bank's generation too; only when that moved are they read again and the
        ranking asked once more, so a ranking always uses its own rows' statistics."""
        operator, terms = ("OR", []) if match is None else expression_terms(match)
        listing = None if every is None else expression_terms(every)
        wanted = [value for value in identifiers if storable(value)]  # the others match nothing
        with self._banks.connection() as conn:
            tenant_id = self._banks.tenant_id(conn, self.tenant)
            if tenant_id is None:
                return LexicalHalf([], [], {})
            known = None if match is None else self._remembered(terms)
            asked = [
                None if known is None else ranking(known, operator, terms, where, limit),
                None if listing is None else matching(tenant_id, *listing, where, limit),
                identifier_lookup(tenant_id, wanted, where) if wanted else None,
            ]
            # A pipeline only when it saves a round trip: it costs one more message to enter and leave.
            with conn.pipeline() if sum(1 for a in asked if a is not None) > 1 else contextlib.nullcontext():
                cursors = [None if statement is None else conn.execute(*statement) for statement in asked]
            rows = [[] if cursor is None else cursor.fetchall() for cursor in cursors]
            if known is not None and rows[0] and rows[0][0][0] == known[0]:
                self._banks.saw(tenant_id, known[0])
            elif match is not None:  # not remembered, or the bank moved since: read them now
                known = self._statistics(conn, terms)
                statement = None if known is None else ranking(known, operator, terms, where, limit)
                rows[0] = [] if statement is None else conn.execute(*statement).fetchall()
        return LexicalHalf(
            [LexicalHit(int(r[1]), -float(r[2])) for r in rows[0] if r[1] is not None],
            [int(r[0]) for r in rows[1]],
            identifier_hits(rows[2]),
        )

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]:
        if not rowids:
            return {}
        rows = self._rows(
            "SELECT rowid, doc, text FROM {notes} WHERE tenant_id = %s AND rowid = ANY(%s)",
            lambda bank: (bank, [int(r) for r in rowids]),
        )
        return {int(r[0]): note_from_row(r[1], r[2]) for r in rows}

    def case_notes(self, case_id: str) -> list[CaseNote]:
        if not storable(case_id):
            return []
        rows = self._rows(
            "SELECT doc, text FROM {notes} WHERE tenant_id = %s AND case_id = %s "
            'ORDER BY created_ts, note_id COLLATE "C"',
            lambda bank: (bank, case_id),
        )
        return [note_from_row(r[0], r[1]) for r in rows]

    def case_ids(self) -> list[str]:
        rows = self._rows(
            'SELECT DISTINCT case_id COLLATE "C" AS c FROM {notes} WHERE tenant_id = %s ORDER BY c'
        )
        return [str(r[0]) for r in rows]

    def vectors(self) -> TenantVectors | None:
        """This bank's vectors, from this replica's memory unless the bank's generation moved."""
        with self._banks.connection() as conn:
            state = self._banks.state(conn, self.tenant)
            if state is None:
                return None
            tenant_id, generation = state

            def load() -> tuple[int, str | None, list[VectorRow]]:
                with conn.transaction():
                    # Generation and rows read in one snapshot, so the matrix is the generation's own.
                    conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                    now = conn.execute(
                        "SELECT generation, space FROM aml_note_tenants WHERE tenant_id = %s", (tenant_id,)
                    ).fetchone()
                    assert now is not None
                    rows = conn.execute(
                        "SELECT rowid, embedding, created_ts, case_id, typologies FROM "  # noqa: S608
                        + partition(tenant_id)
                        + " WHERE tenant_id = %s ORDER BY rowid",
                        (tenant_id,),
                    ).fetchall()
                space = None if now[1] is None else str(now[1])
                return (
                    int(now[0]),
                    space,
                    [(int(r[0]), bytes(r[1]), float(r[2]), str(r[3]), str(r[4])) for r in rows],
                )

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
