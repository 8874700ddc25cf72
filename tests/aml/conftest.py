"""Shared fixtures: one loaded embedder per session, and a small demo store built once per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aml_mcp.aml.demo.corpus import DemoCorpus, generate
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch

DEMO_NOTES_PER_TENANT = 240


@pytest.fixture(scope="session")
def embedder() -> StaticEmbedder:
    return StaticEmbedder.load()


@pytest.fixture(scope="session")
def searcher(embedder: StaticEmbedder) -> NoteSearch:
    return NoteSearch(embedder)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteNotes]:
    with SqliteNotes.open(tmp_path / "data") as opened:
        yield opened


@pytest.fixture(scope="session")
def demo_corpus() -> DemoCorpus:
    return generate(DEMO_NOTES_PER_TENANT, exact_per_kind=8)


@pytest.fixture(scope="session")
def demo_store(
    tmp_path_factory: pytest.TempPathFactory, demo_corpus: DemoCorpus, embedder: StaticEmbedder
) -> Iterator[SqliteNotes]:
    """Three demo banks, loaded once for every read-only test of the session."""
    with SqliteNotes.open(tmp_path_factory.mktemp("demo")) as opened:
        for tenant, notes in demo_corpus.notes.items():
            write_notes(opened, tenant, [n.note for n in notes], embedder)
        yield opened
