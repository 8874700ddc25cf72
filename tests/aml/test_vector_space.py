"""Vectors of another embedding table never mix in: writes refuse, search falls back, reembed fixes."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from aml_mcp.aml.ingest import ingest_file, reembed_tenant
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchMode, SearchRequest


class _Rotated:
    """The shipped embedder in a different (rotated) vector space, as a rebuilt table would be."""

    def __init__(self, inner: StaticEmbedder) -> None:
        self._inner = inner
        self._perm = np.random.default_rng(3).permutation(inner.dims)

    @property
    def dims(self) -> int:
        return self._inner.dims

    @property
    def name(self) -> str:
        return self._inner.name + ":rotated"

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._inner.encode(texts)[:, self._perm]


def _file(tmp_path: Path, note_id: str, text: str) -> Path:
    row = {"note_id": note_id, "case_id": "C-1", "created_at": "2024-01-01", "text": text}
    path = tmp_path / f"{note_id}.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path


def test_mismatched_space_is_refused_then_reembedded(
    tmp_path: Path, store: SqliteNotes, embedder: StaticEmbedder
) -> None:
    rotated = _Rotated(embedder)
    assert ingest_file(_file(tmp_path, "n1", "Casino chips bought with cash."), "bank-a", store, embedder).ok
    tenant = store.tenant("bank-a")
    assert tenant.vector_space() == embedder.name

    report = ingest_file(_file(tmp_path, "n2", "Bitcoin sent through a mixer."), "bank-a", store, rotated)
    assert not report.ok and report.fatal is not None and "re-embed" in report.fatal
    assert tenant.count() == 1

    # Searching with the other embedder skips dense scoring instead of ranking by noise.
    searcher = NoteSearch(rotated)
    assert searcher.search(tenant, SearchRequest(query="gambling hall"), SearchMode.DENSE) == []
    assert [h.note_id for h in searcher.search(tenant, SearchRequest(query="casino"))] == ["n1"]

    assert reembed_tenant(store, "bank-a", rotated) == 1
    assert tenant.vector_space() == rotated.name
    assert reembed_tenant(store, "bank-a", rotated) == 0
    dense = searcher.search(tenant, SearchRequest(query="gambling hall"), SearchMode.DENSE)
    assert [h.note_id for h in dense] == ["n1"]
    stored = tenant.vectors()
    assert stored is not None
    expected = rotated.encode(["Casino chips bought with cash."])[0]
    assert np.allclose(stored.matrix[0], expected, atol=1e-2)


def test_replace_vectors_needs_every_note(
    store: SqliteNotes, embedder: StaticEmbedder, tmp_path: Path
) -> None:
    for i in range(2):
        assert ingest_file(_file(tmp_path, f"n{i}", f"note {i}"), "bank-a", store, embedder).ok
    with pytest.raises(ValueError, match="every note"):
        store.tenant("bank-a").replace_vectors([(1, np.zeros(embedder.dims, np.float32))], space="x")
    assert store.tenant("bank-a").vector_space() == embedder.name


def test_replace_vectors_refuses_when_a_note_was_replaced_meanwhile(
    store: SqliteNotes, embedder: StaticEmbedder, tmp_path: Path
) -> None:
    """A move computed before a note was re-ingested (new row id, same count) must not switch the
    space: that note would keep a vector of the old one."""
    for i in range(2):
        assert ingest_file(_file(tmp_path, f"n{i}", f"note {i}"), "bank-a", store, embedder).ok
    tenant = store.tenant("bank-a")
    generation = tenant.generation()
    stale = [rowid for batch in tenant.iter_texts() for rowid, _ in batch]
    assert ingest_file(_file(tmp_path, "n1", "note 1, amended"), "bank-a", store, embedder).ok
    assert [rowid for batch in tenant.iter_texts() for rowid, _ in batch] == stale, "row id reused"
    with pytest.raises(ValueError, match="changed"):
        tenant.replace_vectors(
            [(r, np.zeros(embedder.dims, np.float32)) for r in stale], space="x", generation=generation
        )
    assert tenant.vector_space() == embedder.name
