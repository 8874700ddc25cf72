"""Case notes and tenants: the shape a bank's data must have before anything stores it, and the
values both notes stores and the search speak in.

A note is validated in full at the door (pydantic, strict about unknown fields) so that the
store, the search and the SAR drafter downstream can trust every field without re-checking.
Tenant ids are validated here too, because they end up in file names and SQL parameters and a
malformed one must be refused before it reaches either.

The rest is backend-neutral on purpose: the errors a store raises, the filter every search path
applies, the in-memory vectors dense search reads, and the row helpers that turn a note into the
columns both stores keep. The SQLite and the PostgreSQL store import them from here, so neither
is the other's dictionary, and the store protocols (`notes.storage`) need nothing else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from aml_mcp.store.faults import StorageFault
from aml_mcp.store.sqlite import DatabaseFileError
from aml_mcp.store.text import storable

TENANT_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,63}$")
"""Lower-case, short, no separators that could be confused in paths or logs."""

_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,127}$"
_NOT_ALNUM = re.compile(r"[\W_]+")


class InvalidTenantError(ValueError):
    """A tenant id that does not match `TENANT_PATTERN`."""


def validate_tenant(tenant: str) -> str:
    """Return `tenant` unchanged if it is a well-formed tenant id, else raise `InvalidTenantError`."""
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidTenantError(
            f"invalid tenant id {tenant!r}: use 1-64 characters of a-z, 0-9, '_', '.', '-' "
            "starting with a letter or digit"
        )
    return tenant


class Subject(BaseModel):
    """A person or entity a case is about; any field may be unknown (the SAR drafter asks for it)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    name: str = Field(min_length=1, max_length=200)
    account_id: str | None = Field(default=None, min_length=1, max_length=64)
    role: str | None = Field(default=None, max_length=64)
    date_of_birth: date | None = None


class CaseNote(BaseModel):
    """One analyst note as a bank delivers it (one JSONL row)."""

    model_config = ConfigDict(extra="forbid", frozen=True, str_strip_whitespace=True)

    note_id: str = Field(pattern=_ID_PATTERN)
    case_id: str = Field(pattern=_ID_PATTERN)
    created_at: datetime
    text: str = Field(min_length=1, max_length=50_000)
    author: str | None = Field(default=None, max_length=200)
    subjects: tuple[Subject, ...] = ()
    typologies: tuple[str, ...] = ()
    amount: Decimal | None = Field(default=None, ge=0, max_digits=20, decimal_places=2)
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$")
    jurisdictions: tuple[str, ...] = ()
    counterparties: tuple[str, ...] = ()

    @field_validator("created_at")
    @classmethod
    def _aware_utc(cls, value: datetime) -> datetime:
        """Naive timestamps are read as UTC so date filters compare like with like."""
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
            raise ValueError("is out of range once converted to UTC (years 1-9999)") from None

    @field_validator("typologies", "jurisdictions", "counterparties")
    @classmethod
    def _non_empty_items(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        cleaned = tuple(v.strip() for v in values)
        if any(not v or len(v) > 200 for v in cleaned):
            raise ValueError("items must be non-empty strings of at most 200 characters")
        return cleaned

    @field_validator("typologies")
    @classmethod
    def _normalise_typologies(cls, values: tuple[str, ...]) -> tuple[str, ...]:
        """Typology codes compare case-insensitively; store one spelling."""
        return tuple(dict.fromkeys(normalise_typology(v) for v in values))


def normalise_typology(value: str) -> str:
    """`"Trade-Based Laundering"` and `"trade_based_laundering"` are the same typology code."""
    return re.sub(r"[^a-z0-9]+", "_", value.strip().lower()).strip("_")


def normalise_identifier(value: str) -> str:
    """Identifiers compare case- and spacing-insensitively: `"acc 00123"` finds `"ACC-00123"`."""
    return _NOT_ALNUM.sub("", value.casefold())


def normalise_name(value: str) -> str:
    """Names compare on lower-cased words: `"SMITH,  John"` is not `"John Smith"`, but case is free."""
    return _NOT_ALNUM.sub(" ", value.casefold()).strip()


def parse_iso_bound(value: str, *, end: bool) -> float:
    """A date or datetime filter bound as epoch seconds; a bare date covers its whole day."""
    if len(value) == 10:
        day = datetime.fromisoformat(value).replace(tzinfo=UTC)
        return (day + timedelta(days=1)).timestamp() - 1e-6 if end else day.timestamp()
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


# -- what a store raises -----------------------------------------------------------------------------


class NotesDamagedError(DatabaseFileError):
    """The notes database is damaged: nothing read from it can be trusted until it is restored.

    The message is one line without paths, fit for a readiness reason or a command's refusal.
    """


class UnstorableNoteError(ValueError):
    """A note holds text the stores do not keep as written (PostgreSQL `TEXT` refuses U+0000, no
    driver sends an unpaired surrogate); both stores refuse the whole batch before anything is
    written, so a file is refused alike wherever it is ingested."""


class NotesUnavailableError(StorageFault, RuntimeError):
    """A shared notes store cannot be reached (or is out of resources) right now: retry later.

    A storage fault like any store's (`store.faults`): a task body that meets it is run again and a
    request under it is answered 503, never taken for a bug in the tool. The message is one short
    cause without addresses, fit for a client."""

    def __init__(self, cause: str) -> None:
        super().__init__(f"notes store unavailable: {cause}", cause)


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


def refuse_unstorable_space(space: str) -> None:
    """Raise `UnstorableNoteError` for a vector space name no store keeps as written."""
    if not storable(space):
        raise UnstorableNoteError("a vector space name holds U+0000 or an unpaired surrogate")


# -- what a search reads -----------------------------------------------------------------------------


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
    space: str | None = None
    """The embedder the vectors were made with (one per bank and generation)."""


@dataclass(frozen=True, slots=True)
class NoteFilter:
    """Optional restrictions every search path applies the same way (each store writes them in its
    own SQL; `mask` applies them to the vectors in memory)."""

    date_from_ts: float | None = None
    date_to_ts: float | None = None
    typology: str | None = None
    case_id: str | None = None

    def sql(self, mark: str, typology_test: str) -> tuple[str, list[object]]:
        """The filter as a SQL fragment over table alias `n` (each condition after ` AND `; empty
        when nothing is filtered) and its parameters, for a store whose placeholder is `mark` and
        whose test that `n.typologies` holds a parameter is `typology_test` (`instr`, `strpos`).

        A value no store can hold (U+0000, a lone surrogate) equals no stored value: its condition
        is false, and it is never sent (a NUL would end a pattern early)."""
        conditions: list[str] = []
        params: list[object] = []
        for condition, value in (
            (f"n.created_ts >= {mark}", self.date_from_ts),
            (f"n.created_ts <= {mark}", self.date_to_ts),
            (f"n.case_id = {mark}", self.case_id),
            (typology_test, None if self.typology is None else f"|{self.typology}|"),
        ):
            if value is not None:
                storable_value = not isinstance(value, str) or storable(value)
                conditions.append(condition if storable_value else "1 = 0")
                params.extend([value] if storable_value else [])
        return "".join(f" AND {c}" for c in conditions), params

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


@dataclass(frozen=True, slots=True)
class TermStatistics:
    """Document frequencies of some terms within one tenant's notes."""

    documents: int
    df: dict[str, int]


@dataclass(frozen=True, slots=True)
class LexicalHit:
    rowid: int
    bm25: float
    """BM25 as FTS5's `bm25()` gives it, negated (both stores, `notes.bm25`): lower is better."""


@dataclass(frozen=True, slots=True)
class LexicalHalf:
    """The lexical half of one search, asked of a bank at once (`TenantNoteAccess.lexical_half`):
    one round trip on the shared store instead of three."""

    hits: list[LexicalHit]
    """The best notes for the OR expression, by BM25 (`lexical`)."""
    every: list[int]
    """Notes holding every word of the AND expression, unranked (`matching`)."""
    identifiers: dict[int, list[str]]
    """Notes carrying one of the identifiers (`identifier_matches`)."""


# -- a note as both stores keep it ---------------------------------------------------------------------

STORED_COLUMNS = "note_id, case_id, created_ts, typologies, text, subjects, identifiers, doc, embedding"
"""The columns both stores write for a note, in the order of `StoredNote.values()`."""


@dataclass(frozen=True, slots=True)
class StoredNote:
    """A note with the columns both stores derive from it: the text the full-text index weights
    as subjects and as identifiers, the typology column (`|a|b|`, so a match on `|a|` finds whole
    codes only), the JSON of everything but the text, the normalised identifiers an
    exact-identifier query may hit, and the float16 embedding."""

    note: CaseNote
    typologies: str
    subjects: str
    identifiers: str
    doc: str
    identifier_rows: list[tuple[str, str]]
    """(normalised value, kind) pairs, each once."""
    embedding: bytes

    def values(self) -> tuple[object, ...]:
        """The note's `STORED_COLUMNS`, in order."""
        note = self.note
        return (
            note.note_id,
            note.case_id,
            note.created_at.timestamp(),
            self.typologies,
            note.text,
            self.subjects,
            self.identifiers,
            self.doc,
            self.embedding,
        )


def stored_notes(
    notes: Sequence[CaseNote], embeddings: npt.NDArray[np.float32], *, space: str
) -> list[StoredNote]:
    """`notes` as both stores write them, or a refusal before anything is written: `ValueError`
    unless there is one embedding per note, `UnstorableNoteError` for a vector space name or a
    note holding text no store keeps as written (U+0000, which PostgreSQL `TEXT` cannot hold, or
    an unpaired surrogate, which neither driver can send), so a file ingests the same way wherever
    it goes."""
    if len(notes) != len(embeddings):
        raise ValueError("one embedding per note is required")
    refuse_unstorable_space(space)
    blobs = np.ascontiguousarray(embeddings, dtype=np.float16)
    return [_stored(note, blob.tobytes()) for note, blob in zip(notes, blobs, strict=True)]


def _stored(note: CaseNote, embedding: bytes) -> StoredNote:
    try:
        doc = note.model_dump_json(exclude={"text"})
    except ValueError as exc:
        raise UnstorableNoteError(f"note {note.note_id!r} cannot be stored: {exc}") from exc
    row = StoredNote(
        note=note,
        typologies="|" + "|".join(note.typologies) + "|" if note.typologies else "|",
        subjects=" ; ".join(
            " ".join(x for x in (s.name, s.account_id or "", s.role or "") if x) for s in note.subjects
        ),
        identifiers=" ".join([note.case_id, note.note_id, *note.counterparties]),
        doc=doc,
        identifier_rows=_identifier_rows(note),
        embedding=embedding,
    )
    texts = [note.note_id, note.case_id, note.text, row.typologies, row.subjects, row.identifiers]
    if not all(storable(t) for t in texts) or not all(storable(v) for v, _ in row.identifier_rows):
        raise UnstorableNoteError(
            f"note {note.note_id!r} holds a NUL character (U+0000) or an unpaired surrogate, "
            "which the notes store does not keep: remove it and ingest again"
        )
    return row


def _identifier_rows(note: CaseNote) -> list[tuple[str, str]]:
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


def identifier_hits(rows: Iterable[tuple[int, str, str]]) -> dict[int, list[str]]:
    """(note row id, kind, value) rows of an identifier lookup as row id -> its `kind:value`s."""
    found: dict[int, list[str]] = {}
    for rowid, kind, value in rows:
        found.setdefault(int(rowid), []).append(f"{kind}:{value}")
    return found


def note_from_row(doc: str, text: str) -> CaseNote:
    """Rebuild a note from its stored JSON, which leaves the text out so the text is stored once.

    `doc` is always a non-empty JSON object written by `model_dump_json`, so splicing the text in
    as one more member is exact, and lets pydantic parse the whole row in one native call.
    """
    return CaseNote.model_validate_json(f'{doc[:-1]},"text":{json.dumps(text)}}}')
