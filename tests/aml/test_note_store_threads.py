"""The notes store under bursts of short-lived reader threads: no file descriptor per thread."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchRequest


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_searches_from_many_short_lived_threads_leave_no_files_open(
    tmp_path: Path, embedder: StaticEmbedder, searcher: NoteSearch
) -> None:
    bank = TENANTS[0]
    with SqliteNotes.open(tmp_path) as store:
        write_notes(store, bank.name, [d.note for d in generate_notes(bank, 100)], embedder)
        notes = store.tenant(bank.name)
        request = SearchRequest(query="cash deposits", top_k=5)
        assert searcher.search(notes, request)
        before = open_fds()
        for _ in range(10):
            barrier = threading.Barrier(12)
            found: list[int] = []

            def search(barrier: threading.Barrier = barrier, found: list[int] = found) -> None:
                barrier.wait()
                found.append(len(searcher.search(notes, request)))

            threads = [threading.Thread(target=search) for _ in range(12)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert found == [5] * 12
        assert open_fds() <= before + 2
