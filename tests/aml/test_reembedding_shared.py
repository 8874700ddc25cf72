"""Replicas sharing one PostgreSQL notes store move a bank to a new embedder once: the replica
holding the bank's move lock embeds it, the others wait for the switch and then search it in the
new space too (their in-memory vectors reload when the bank's generation moves)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import anyio
import numpy as np
import numpy.typing as npt
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.reembedding import BackgroundReembedding
from aml_mcp.aml.search.choice import Embedders
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema

pytestmark = pytest.mark.anyio
BANK = TENANTS[0].name


class CountingEmbedder:
    """A new vector space that counts the notes it embeds."""

    dims = 4
    name = "counting:4"

    def __init__(self) -> None:
        self.embedded = 0
        self._lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        with self._lock:
            self.embedded += len(texts)
        time.sleep(0.01 * len(texts))  # a slow embedder: the others must wait, not move it too
        rows = np.ones((len(texts), self.dims), dtype=np.float32) / 2.0
        return rows


async def test_three_replicas_move_a_bank_once(embedder: StaticEmbedder) -> None:
    static = embedder
    with scratch_schema() as (url, schema):
        stores = [PostgresNotes(PostgresDatabase(url, schema=schema)).open() for _ in range(3)]
        try:
            write_notes(stores[0], BANK, [d.note for d in generate_notes(TENANTS[0], 60)], static)
            counting = CountingEmbedder()
            movers = [BackgroundReembedding(s, Embedders(counting, (static,))) for s in stores]
            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for mover in movers:
                        group.start_soon(mover.run)
            assert counting.embedded == 60  # once, not three times
            assert [m.status() for m in movers] == [None, None, None]
            for store in stores:
                assert store.tenant(BANK).vector_space() == counting.name
                vectors = store.tenant(BANK).vectors()
                assert vectors is not None and vectors.matrix.shape == (60, 4)
        finally:
            for store in stores:
                store.close()
