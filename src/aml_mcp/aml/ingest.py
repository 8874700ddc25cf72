"""JSONL ingestion: validate every row, then write all of a file or none of it.

Why all-or-nothing: a bank that loads a file with one malformed row must not end up with a
half-loaded case whose SAR is then drafted from partial notes. So every row is parsed and
validated first, every bad row is reported with its line number and reason, and only a fully
valid file is embedded and written, in one transaction. Re-ingesting a note id replaces it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from aml_mcp.aml.notes.model import (
    CaseNote,
    InvalidTenantError,
    UnstorableNoteError,
    VectorSpaceMismatchError,
    validate_tenant,
)
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.choice import EmbedderKind, Embedders, load_embedders
from aml_mcp.aml.search.embeddings import Embedder

MAX_FILE_BYTES = 2 * 1024**3
"""A sanity bound: larger exports should be split by the bank (ingest holds a file in memory)."""


@dataclass(frozen=True, slots=True)
class RowError:
    """Why one line of the file was refused (line numbers start at 1, as editors show them)."""

    line: int
    reason: str


@dataclass(slots=True)
class IngestReport:
    """What an ingest did; `ok` is false when nothing was written."""

    path: str
    tenant: str
    rows: int = 0
    inserted: int = 0
    replaced: int = 0
    errors: list[RowError] = field(default_factory=list)
    fatal: str | None = None
    """A file-level failure (unreadable, not UTF-8, too large) instead of row errors."""

    @property
    def ok(self) -> bool:
        return self.fatal is None and not self.errors

    def render(self) -> str:
        """Human-readable summary, one bad row per line."""
        if self.fatal is not None:
            return f"{self.path}: not ingested: {self.fatal}"
        if self.errors:
            head = f"{self.path}: not ingested: {len(self.errors)} bad row(s) of {self.rows}"
            lines = [f"{head}; nothing was changed"]
            lines += [f"  line {e.line}: {e.reason}" for e in self.errors]
            return "\n".join(lines)
        return (
            f"{self.path}: ingested {self.rows} note(s) for tenant {self.tenant!r} "
            f"({self.inserted} new, {self.replaced} replaced)"
        )


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "row"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


def _first_sentence(exc: BaseException) -> str:
    """The gist of an error message (Python's advice on raising its own limits is not for banks)."""
    return str(exc).split(": use ", 1)[0].split(";", 1)[0] or type(exc).__name__


def parse_lines(lines: Iterable[str]) -> tuple[list[CaseNote], list[RowError], int]:
    """Validate JSONL lines: the notes, the bad rows, and the number of non-blank rows.

    Blank lines are skipped. A note id that appears twice in one file is an error on the second
    line (which one should win would be a guess). Hostile rows (nesting deep enough to exhaust the
    parser, integers of thousands of digits, dates that overflow once converted to UTC) are row
    errors like any other, never a crash that would hide every other bad row.
    """
    notes: list[CaseNote] = []
    errors: list[RowError] = []
    seen: dict[str, int] = {}
    rows = 0
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        rows += 1
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(RowError(number, f"not valid JSON: {exc.msg} at column {exc.colno}"))
            continue
        except RecursionError:
            errors.append(RowError(number, "not valid JSON here: nested too deeply"))
            continue
        except ValueError as exc:  # e.g. an integer of more digits than Python converts
            errors.append(RowError(number, f"not valid JSON here: {_first_sentence(exc)}"))
            continue
        if not isinstance(data, dict):
            errors.append(RowError(number, f"expected a JSON object, got {type(data).__name__}"))
            continue
        try:
            note = CaseNote.model_validate(data)
        except ValidationError as exc:
            errors.append(RowError(number, _describe(exc)))
            continue
        except (RecursionError, OverflowError, ValueError) as exc:  # hostile values validators choke on
            errors.append(RowError(number, f"cannot be read as a note: {_first_sentence(exc)}"))
            continue
        first = seen.setdefault(note.note_id, number)
        if first != number:
            errors.append(RowError(number, f"note_id {note.note_id!r} already appears on line {first}"))
            continue
        notes.append(note)
    return notes, errors, rows


def write_notes(
    store: NotesBackend, tenant: str, notes: Sequence[CaseNote], embedder: Embedder | Embedders
) -> tuple[int, int]:
    """Embed validated notes, then store them in one transaction; returns (inserted, replaced).

    The embedding runs before the transaction (the transformer takes seconds per hundred notes;
    the write lock is held only for the inserts). A tenant still in an older vector space that
    `embedder` can embed (the static table while it waits for `reembed`) gets vectors in that
    space, so an ingest never fails for want of a migration.
    """
    if not notes:
        return 0, 0
    if isinstance(embedder, Embedders):
        embedder = embedder.for_space(store.tenant(tenant).vector_space()) or embedder.primary
    vectors = embedder.encode([n.text for n in notes])
    replaced = store.tenant(tenant).replace_notes(notes, vectors, space=embedder.name)
    return len(notes) - replaced, replaced


def reembed_tenant(
    store: NotesBackend,
    tenant: str,
    embedder: Embedder,
    progress: Callable[[int, int], None] | None = None,
    batch: int = 64,
) -> int:
    """Recompute every note vector of `tenant` with `embedder` (after the dense half changed).

    The tenant keeps serving from its old vectors (searched with the old embedder) until the
    new ones replace them all in one transaction; `progress(done, total)` hears each batch.
    Returns the number of notes re-embedded (0 when the tenant is already in this space);
    `ValueError` when the tenant's notes changed meanwhile (nothing is switched: run it again).
    """
    notes = store.tenant(tenant)
    if notes.vector_space() in (None, embedder.name):
        return 0
    generation = notes.generation()
    total = notes.count()
    vectors: list[tuple[int, npt.NDArray[np.float32]]] = []
    for rows in notes.iter_texts(batch=batch):
        encoded = embedder.encode([text for _, text in rows])
        vectors.extend((rowid, encoded[i]) for i, (rowid, _) in enumerate(rows))
        if progress is not None:
            progress(len(vectors), total)
    notes.replace_vectors(vectors, space=embedder.name, generation=generation)
    return len(vectors)


def ingest_file(path: Path, tenant: str, store: NotesBackend, embedder: Embedder | Embedders) -> IngestReport:
    """Validate `path` (JSONL) and, only if every row is valid, store all its notes for `tenant`."""
    report = IngestReport(path=str(path), tenant=tenant)
    try:
        validate_tenant(tenant)
        if path.stat().st_size > MAX_FILE_BYTES:
            report.fatal = f"file is larger than {MAX_FILE_BYTES} bytes; split it"
            return report
        with path.open(encoding="utf-8") as handle:
            notes, errors, rows = parse_lines(handle)
    except InvalidTenantError as exc:
        report.fatal = str(exc)
        return report
    except UnicodeDecodeError as exc:
        report.fatal = f"not UTF-8 text (byte {exc.start})"
        return report
    except OSError as exc:
        report.fatal = f"cannot read the file: {exc.strerror or exc}"
        return report
    report.rows = rows
    report.errors = errors
    if errors:
        return report
    if not notes:
        report.fatal = "the file holds no notes"
        return report
    try:
        report.inserted, report.replaced = write_notes(store, tenant, notes, embedder)
    except (VectorSpaceMismatchError, UnstorableNoteError) as exc:
        report.fatal = str(exc)
    return report


def run_ingest(
    path: Path,
    tenant: str,
    data_dir: Path,
    out: TextIO | None = None,
    embedder: EmbedderKind = EmbedderKind.MINILM,
    *,
    store: NotesBackend | None = None,
) -> int:
    """What `aml-mcp ingest FILE --tenant T [--data-dir D]` runs: prints the report, returns the exit code.

    Writes to `store` when given (the shared PostgreSQL notes; the caller closes it), else to the
    SQLite store in `data_dir`. Exit codes: 0 ingested, 1 nothing ingested (bad rows or
    unreadable file).
    """
    stream = out if out is not None else sys.stdout
    try:
        validate_tenant(tenant)
    except InvalidTenantError as exc:
        print(f"{path}: not ingested: {exc}", file=stream)
        return 1
    embedders = load_embedders(embedder)
    if store is not None:
        report = ingest_file(path, tenant, store, embedders)
    else:
        with SqliteNotes.open(data_dir) as local:
            report = ingest_file(path, tenant, local, embedders)
    print(report.render(), file=stream)
    return 0 if report.ok else 1
