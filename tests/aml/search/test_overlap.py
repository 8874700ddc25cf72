"""Embedding the query on another thread while the index is read changes no result."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import numpy.typing as npt

from aml_mcp.aml.demo.corpus import TENANTS, DemoCorpus
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchMode, SearchRequest


class _ThreadRecorder:
    """The real static embedder, noting which thread embedded each query."""

    def __init__(self, inner: StaticEmbedder) -> None:
        self._inner = inner
        self.threads: list[str] = []

    @property
    def dims(self) -> int:
        return self._inner.dims

    @property
    def name(self) -> str:
        return self._inner.name

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.threads.append(threading.current_thread().name)
        return self._inner.encode(texts)


def test_overlapped_search_equals_sequential(
    demo_store: SqliteNotes, demo_corpus: DemoCorpus, embedder: StaticEmbedder
) -> None:
    recorder = _ThreadRecorder(embedder)
    queries = [q for q in demo_corpus.queries if q.tenant == TENANTS[0].name][:25]
    assert queries
    with ThreadPoolExecutor(2, "query-embedding") as pool:
        overlapped = NoteSearch(recorder, overlap=pool, overlap_from=0)
        sequential = NoteSearch(embedder)
        view = demo_store.tenant(TENANTS[0].name)
        for q in queries:
            for mode in SearchMode:
                request = SearchRequest(query=q.text, top_k=10)
                assert overlapped.search(view, request, mode) == sequential.search(view, request, mode)
    assert recorder.threads and all(name.startswith("query-embedding") for name in recorder.threads)


def test_small_banks_stay_on_the_calling_thread(demo_store: SqliteNotes, embedder: StaticEmbedder) -> None:
    recorder = _ThreadRecorder(embedder)
    with ThreadPoolExecutor(2, "query-embedding") as pool:
        search = NoteSearch(recorder, overlap=pool)  # the default threshold is far above 240 notes
        assert search.search(demo_store.tenant(TENANTS[0].name), SearchRequest(query="cash deposits"))
    assert recorder.threads == [threading.current_thread().name]
