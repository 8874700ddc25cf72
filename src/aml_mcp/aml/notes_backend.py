"""What search, case work, evaluation, ingest and the demo need from a notes store.

Why protocols: one laptop keeps its notes in SQLite (`note_store.NoteStore`, FTS5 per bank), a
deployment of several replicas keeps them in PostgreSQL (`postgres_notes.PostgresNoteStore`, a
LIST partition per bank). The code above the store is the same for both, so it is written against
these protocols, which list exactly the methods it calls and nothing else: a backend never has to
grow a method only one caller's test used.

The tenant wall is part of the shape: the only way to a bank's notes is
`NotesBackend.tenant(<validated tenant>)`, which returns a `TenantNoteAccess` bound to that bank;
no method of it takes a tenant. The only cross-tenant question, whether a string is another
bank's identifier, is `ForeignIdentifiers`, answered yes/no per value.

Lexical expressions (`lexical`, `matching`) are what `search.lexical` builds: double-quoted
words (letters and digits only) joined by ` OR ` or by ` AND `, never mixed. SQLite hands them
to FTS5 as written; PostgreSQL translates exactly that grammar and refuses anything else.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.note_store import LexicalHit, NoteFilter, TenantVectors, TermStatistics
from aml_mcp.aml.notes import CaseNote


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

    def get(self, rowids: Sequence[int]) -> dict[int, CaseNote]: ...

    def by_note_id(self, note_id: str) -> CaseNote | None: ...

    def case_notes(self, case_id: str) -> list[CaseNote]: ...

    def case_ids(self) -> list[str]: ...

    def iter_notes(self, batch: int = 2000) -> Iterator[CaseNote]: ...

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
