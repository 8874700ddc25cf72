"""The notes store at rest: owner-only files, no empty file taken for a new store, damage remembered."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.model import NotesDamagedError
from aml_mcp.aml.notes.storage.sqlite import DB_FILE_NAME, SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchRequest
from aml_mcp.store.sqlite import DatabaseFileError
from tests.support.damaged_files import checkpointed, replace_header, scramble_middle, truncate_to_zero
from tests.support.notes import notes_in_row_order

BANK = TENANTS[0].name


def loaded_store(data_dir: Path, embedder: StaticEmbedder) -> Path:
    with SqliteNotes.open(data_dir) as store:
        write_notes(store, BANK, [d.note for d in generate_notes(TENANTS[0], 300)], embedder)
    path = data_dir / DB_FILE_NAME
    checkpointed(path)
    return path


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_store_is_owner_only_whatever_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        with SqliteNotes.open(tmp_path / "data") as store:
            store.tenants()
            files = sorted((tmp_path / "data").iterdir())
            assert files, "the store made no file"
            assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
        assert mode(tmp_path / "data") == 0o700
    finally:
        os.umask(previous)


def test_an_existing_world_readable_store_is_tightened_on_open(tmp_path: Path) -> None:
    SqliteNotes.open(tmp_path).close()
    path = tmp_path / DB_FILE_NAME
    path.chmod(0o644)
    SqliteNotes.open(tmp_path).close()
    assert mode(path) == 0o600


def test_an_empty_notes_file_is_refused_not_taken_for_a_new_store(tmp_path: Path) -> None:
    SqliteNotes.open(tmp_path).close()
    truncate_to_zero(tmp_path / DB_FILE_NAME)
    with pytest.raises(DatabaseFileError, match=r"notes\.db is empty \(0 bytes\)"):
        SqliteNotes.open(tmp_path)
    assert (tmp_path / DB_FILE_NAME).stat().st_size == 0  # left as found, for the operator


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    SqliteNotes.open(tmp_path).close()
    replace_header(tmp_path / DB_FILE_NAME)
    with pytest.raises(DatabaseFileError, match="not a SQLite database"):
        SqliteNotes.open(tmp_path)


def test_verify_finds_damaged_pages_and_every_read_then_refuses(
    tmp_path: Path, embedder: StaticEmbedder, searcher: NoteSearch
) -> None:
    scramble_middle(loaded_store(tmp_path, embedder))
    with SqliteNotes.open(tmp_path) as store:
        problem = store.verify()
        assert problem is not None and problem.startswith("notes.db is damaged")
        assert str(tmp_path) not in problem  # shown on /readyz: no paths
        assert store.probe() == problem
        with pytest.raises(NotesDamagedError):
            searcher.search(store.tenant(BANK), SearchRequest(query="cash deposits"))
        with pytest.raises(NotesDamagedError):
            store.tenants()


def test_damage_a_read_runs_into_is_remembered(
    tmp_path: Path, embedder: StaticEmbedder, searcher: NoteSearch
) -> None:
    scramble_middle(loaded_store(tmp_path, embedder), count=40)
    with SqliteNotes.open(tmp_path) as store:
        notes = store.tenant(BANK)
        with pytest.raises(NotesDamagedError):
            notes_in_row_order(notes)  # walks every row: meets the damaged pages
        assert store.damage is not None and store.probe() == store.damage
        with pytest.raises(NotesDamagedError):
            searcher.search(notes, SearchRequest(query="cash deposits"))


def test_a_sound_store_verifies_and_probes_clean(tmp_path: Path, embedder: StaticEmbedder) -> None:
    loaded_store(tmp_path, embedder)
    with SqliteNotes.open(tmp_path) as store:
        assert store.verify() is None
        assert store.probe() is None
