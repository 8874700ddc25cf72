"""One bank's searches take their turn: at most `aml.search_concurrency_per_tenant` of them run at
once, while another bank's search goes ahead — a burst of expensive queries from one bank cannot
take every CPU from the others."""

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
from aml_mcp.aml.wiring import build_aml
from aml_mcp.persistence import LocalPersistence

QUERY = SearchRequest(query="cash deposits", top_k=5)


def test_a_bank_runs_one_search_at_a_time_and_others_go_ahead(tmp_path: Path) -> None:
    embedder = StaticEmbedder.load()
    busy, other = TENANTS[0], TENANTS[1]
    with SqliteNotes.open(tmp_path) as store:
        for bank in (busy, other):
            write_notes(store, bank.name, [d.note for d in generate_notes(bank, 30)], embedder)
    local = LocalPersistence(tmp_path)
    notes = local.notes()
    aml = build_aml(
        AmlSettings(embedder="static", search_concurrency_per_tenant=1),
        notes=notes.notes,
        identifiers=notes.identifiers,
        baselines=local.baselines(),
    )
    release = threading.Event()
    running = {busy.name: 0, other.name: 0}
    most = {busy.name: 0, other.name: 0}
    lock = threading.Lock()

    def holding(tenant: str) -> object:
        def render(hits: list[SearchHit]) -> object:
            with lock:
                running[tenant] += 1
                most[tenant] = max(most[tenant], running[tenant])
            try:
                if tenant == busy.name:
                    release.wait(10)
                return len(hits)
            finally:
                with lock:
                    running[tenant] -= 1

        return render

    async def main() -> None:
        async with aml.running(), anyio.create_task_group() as group:
            for _ in range(4):
                group.start_soon(aml.service.search_and_render, busy.name, QUERY, holding(busy.name))
            await anyio.sleep(0.3)
            with anyio.fail_after(5):  # the other bank is not queued behind the busy one
                assert await aml.service.search_and_render(other.name, QUERY, holding(other.name)) == 5
            assert running[busy.name] == 1
            release.set()

    anyio.run(main)
    assert most[busy.name] == 1
