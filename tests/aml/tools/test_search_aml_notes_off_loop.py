"""`search_aml_notes` renders its hits in the search's worker thread, never on the event loop."""

from __future__ import annotations

import threading
from pathlib import Path

import anyio

from aml_mcp.aml.demo.corpus import TENANTS, generate_notes
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import SearchHit, SearchRequest
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.search_aml_notes import render_results
from aml_mcp.aml.wiring import build_aml
from aml_mcp.persistence import LocalPersistence

WORST_CASE = SearchRequest(query=("a b " * 250)[:1000], top_k=50)


def test_search_and_rendering_run_in_one_worker_thread(tmp_path: Path) -> None:
    embedder = StaticEmbedder.load()
    bank = TENANTS[0]
    with SqliteNotes.open(tmp_path) as store:
        write_notes(store, bank.name, [d.note for d in generate_notes(bank, 200)], embedder)
    local = LocalPersistence(tmp_path)
    notes = local.notes()
    aml = build_aml(
        AmlSettings(embedder="static"),
        notes=notes.notes,
        identifiers=notes.identifiers,
        baselines=local.baselines(),
    )
    rendered_on: list[threading.Thread] = []

    def render(hits: list[SearchHit]) -> object:
        rendered_on.append(threading.current_thread())
        return render_results(hits)

    async def call() -> tuple[object, threading.Thread]:
        async with aml.running():
            result = await aml.service.search_and_render(bank.name, WORST_CASE, render)
        return result, threading.current_thread()

    result, loop_thread = anyio.run(call)
    assert rendered_on and rendered_on[0] is not loop_thread
    structured = result.structured_content  # type: ignore[attr-defined]
    assert len(structured["results"]) == 50
