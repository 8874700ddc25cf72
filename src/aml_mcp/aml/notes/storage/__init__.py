"""What search, case work, evaluation, ingest and the demo need from a notes store.

Why protocols: one laptop keeps its notes in SQLite (`sqlite.SqliteNotes`, FTS5 per bank), a
deployment of several replicas keeps them in PostgreSQL (`postgres.PostgresNotes`, a LIST
partition per bank). The code above the store is the same for both, so it is written against
these protocols, which list exactly the methods it calls and nothing else: a backend never has to
grow a method only one caller's test used. Their vocabulary (the note, the filter, the vectors,
the errors) is `notes.model`'s; this module imports no backend.

The tenant wall is part of the shape: the only way to a bank's notes is
`NotesBackend.tenant(<validated tenant>)`, which returns a `TenantNoteAccess` bound to that bank;
no method of it takes a tenant. The only cross-tenant question, whether a string is another
bank's identifier, is `ForeignIdentifiers`, answered yes/no per value.

What both stores do alike: a note's embedding is computed by the caller at ingest and stored as
float16 bytes beside the note; a bank's matrix is loaded into memory on first use and reloaded
only when the bank's generation counter moves (every write moves it, in the writing transaction;
`cache.GenerationCache` keeps it, and the term counts, per generation). Exact identifiers are
looked up in an index of normalised values, so an identifier hit does not depend on full-text
ranking. Text no store keeps as written (U+0000, which PostgreSQL `TEXT` refuses, or an unpaired
surrogate, which neither driver sends) is refused whole before anything is written
(`UnstorableNoteError`), and a lookup, filter or bank name holding it finds nothing.

Lexical expressions (`lexical`, `matching`) are what `search.lexical` builds: double-quoted
words (letters and digits only) joined by ` OR ` or by ` AND `, never mixed
(`checked_expression`). SQLite hands them to FTS5 as written; PostgreSQL translates exactly that
grammar; both refuse anything else.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.notes.model import (
    CaseNote,
    LexicalHalf,
    LexicalHit,
    NoteFilter,
    TenantVectors,
    TermStatistics,
)

LEXICAL_EXPRESSION = re.compile(r'^"([^\W_]+)"(?:( OR | AND )"[^\W_]+")*$')
"""The lexical expressions a notes store takes (what `search.lexical` builds): double-quoted words
of letters and digits, joined by ` OR ` or by ` AND `."""
_WORD = re.compile(r'"([^\W_]+)"')


def checked_expression(match: str) -> str:
    """`match` if it is a lexical expression both stores read alike, else `ValueError`.

    SQLite would hand anything else to FTS5 as its own query syntax (a syntax error, or a query
    PostgreSQL reads differently); refused here, a hostile expression gets one answer on both."""
    if not LEXICAL_EXPRESSION.fullmatch(match):
        raise ValueError("a lexical expression is quoted words joined by OR or by AND")
    if ' OR "' in match and ' AND "' in match:
        raise ValueError("a lexical expression joins its words by OR or by AND, not both")
    return match


def expression_terms(match: str) -> tuple[str, list[str]]:
    """(`"AND"` or `"OR"`, the words) of a lexical expression, for a store that translates the
    grammar rather than handing it on; `ValueError` for anything else (`checked_expression`)."""
    checked_expression(match)
    return ("AND" if ' AND "' in match else "OR"), _WORD.findall(match)


class TenantNoteAccess(Protocol):
    """One tenant's notes: writes, candidate retrieval for search, and lookups."""

    @property
    def tenant(self) -> str: ...

    def replace_notes(
        self, notes: Sequence[CaseNote], embeddings: npt.NDArray[np.float32], *, space: str
    ) -> int: ...

    def vector_space(self) -> str | None: ...

    def generation(self) -> int: ...

    def replace_vectors(
        self,
        vectors: Sequence[tuple[int, npt.NDArray[np.float32]]],
        *,
        space: str,
        generation: int | None = None,
    ) -> None: ...

    def iter_texts(self, batch: int = 2000) -> Iterator[list[tuple[int, str]]]: ...

    def count(self) -> int: ...

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None: ...

    def lexical(self, match: str, where: NoteFilter, limit: int) -> list[LexicalHit]: ...

    def matching(self, match: str, where: NoteFilter, limit: int) -> list[int]: ...

    def identifier_matches(self, values: Sequence[str], where: NoteFilter) -> dict[int, list[str]]: ...

    def lexical_half(
        self, match: str | None, every: str | None, identifiers: Sequence[str], where: NoteFilter, limit: int
    ) -> LexicalHalf:
        """`lexical(match)`, `matching(every)` (each skipped when None) and `identifier_matches`, as
        one request: what the search engine asks, in one round trip where the store is remote."""
        ...

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]: ...

    def case_notes(self, case_id: str) -> list[CaseNote]: ...

    def case_ids(self) -> list[str]: ...

    def vectors(self) -> TenantVectors | None: ...


class NotesBackend(Protocol):
    """A notes store: per-tenant access, the operator's tenant list, health, and a lifetime."""

    @property
    def damage(self) -> str | None: ...

    def verify(self) -> str | None: ...

    def probe(self) -> str | None: ...

    def tenant(self, tenant: str) -> TenantNoteAccess: ...

    def tenants(self) -> list[str]: ...

    def first_load(self) -> AbstractContextManager[None]:
        """Held while the demo corpus is loaded on a first start, so that replicas starting at
        once against one shared store load it once (a no-op where only one process writes)."""
        ...

    def moving(self, tenant: str) -> AbstractContextManager[bool]:
        """Whether this process may re-embed `tenant` now (True), or another process is doing it
        (False); held for the whole move, so replicas sharing a store move each bank once."""
        ...

    def close(self) -> None: ...


class ForeignIdentifiers(Protocol):
    """Which of a tenant's candidate values (normalised) are identifiers of another tenant only."""

    def foreign(self, tenant: str, values: Collection[str]) -> set[str]: ...
