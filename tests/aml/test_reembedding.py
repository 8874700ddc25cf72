"""A bank in the static table's space moves to the transformer in the background after start-up:
ready at once, progress in the metrics (`/readyz` names no bank), dense search in the old space
meanwhile, never mixed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.choice import Embedders
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchMode, SearchRequest
from aml_mcp.aml.search.transformer import SPACE_NAME, TransformerEmbedder
from aml_mcp.app import build_app
from tests.support.asgi import InProcessServer
from tests.support.settings import open_settings
from tests.support.waiting import eventually

BANK = TENANTS[0].name


def test_a_static_bank_is_searched_in_its_own_space_until_moved(
    store: SqliteNotes, embedder: StaticEmbedder
) -> None:
    notes = [d.note for d in generate_notes(TENANTS[0], 40)]
    write_notes(store, BANK, notes, embedder)
    model = TransformerEmbedder.load()
    # Without feedback a dense score is the plain cosine with the query vector, which names its space.
    search = NoteSearch(Embedders(model, (embedder,)), feedback=None)
    view = store.tenant(BANK)
    request = SearchRequest(query="cash kept below the reporting threshold")
    before = search.search(view, request, SearchMode.DENSE)
    assert before, "the static bank is still searched densely, with the static table"
    expected = embedder.encode([request.query])[0]
    vectors = view.vectors()
    assert vectors is not None
    assert abs(before[0].score - float(np.max(vectors.matrix @ expected))) < 1e-4
    alone = NoteSearch(model)
    assert alone.search(view, request, SearchMode.DENSE) == [], "never compared across spaces"


@pytest.mark.slow
def test_serve_moves_static_banks_to_the_transformer_with_progress(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with SqliteNotes.open(data_dir) as store:
        write_notes(store, BANK, [d.note for d in generate_notes(TENANTS[0], 150)], StaticEmbedder.load())
    settings = open_settings(data_dir, aml={"embedder": "minilm"})
    with InProcessServer(build_app(settings)) as served, served.client(timeout=10) as http:
        first = http.get("/readyz")
        assert first.status_code == 200 and first.json() == {"status": "ready"}, first.text

        def banks_left() -> float:
            text = bytes(served.run(served.app.state.metrics.render)).decode()
            line = next(
                line for line in text.splitlines() if line.startswith("aml_mcp_reembedding_banks_left ")
            )
            return float(line.split()[-1])

        eventually(
            banks_left, until=lambda left: left == 1, timeout=30, interval=0.1, what="the move to start"
        )
        eventually(banks_left, until=lambda left: left == 0, timeout=120, interval=0.5, what="re-embedded")
        assert http.get("/readyz").json() == {"status": "ready"}
    with SqliteNotes.open(data_dir) as store:
        view = store.tenant(BANK)
        assert view.vector_space() == SPACE_NAME
        vectors = view.vectors()
        assert vectors is not None and vectors.matrix.shape == (150, 384)


def test_static_setting_leaves_static_banks_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with SqliteNotes.open(data_dir) as store:
        write_notes(store, BANK, [d.note for d in generate_notes(TENANTS[0], 5)], StaticEmbedder.load())
        space = store.tenant(BANK).vector_space()
    with InProcessServer(build_app(open_settings(data_dir))) as served, served.client(timeout=10) as http:
        assert http.get("/readyz").json() == {"status": "ready"}
    with SqliteNotes.open(data_dir) as store:
        assert store.tenant(BANK).vector_space() == space
