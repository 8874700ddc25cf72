"""What the AML tool bodies call: search, case work and evaluation for one verified tenant.

Every method takes the tenant explicitly — the tools pass `ctx.principal.tenant` and nothing
else — and runs synchronous store work in worker threads, so no tool body blocks the event loop.
A tenant claim the notes store could never hold (`notes.TENANT_PATTERN`) is a tenant with no
notes, not an error: such a caller sees empty results, like any bank that has loaded nothing.

The embedder takes about a second to load, so it is loaded once at start-up (`start`), never on
a request's path.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import anyio.to_thread

from aml_mcp.aml.evaluation.run import Evaluator
from aml_mcp.aml.notes.model import InvalidTenantError, validate_tenant
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.sar.batches import CaseWork
from aml_mcp.aml.search.choice import Embedders
from aml_mcp.aml.search.embeddings import Embedder
from aml_mcp.aml.search.engine import NoteSearch, SearchHit, SearchRequest

R = TypeVar("R")


QUERY_EMBEDDING_THREADS = 2
"""One per core of the target machine: more would only queue inside onnxruntime's CPU time."""


class AmlService:
    def __init__(
        self,
        *,
        store: NotesBackend,
        load_embedder: Callable[[], Embedder | Embedders],
        casework: CaseWork,
        evaluator: Callable[[Callable[[], NoteSearch]], Evaluator],
        searches_per_tenant: int = 1,
    ) -> None:
        self.store = store
        self._searches_per_tenant = searches_per_tenant
        self._tenant_threads: dict[str, anyio.CapacityLimiter] = {}
        self.casework = casework
        self._load_embedder = load_embedder
        self._searcher: NoteSearch | None = None
        self._embedders: Embedders | None = None
        self._query_embedding: ThreadPoolExecutor | None = None
        self.evaluator = evaluator(self.searcher)

    async def start(self) -> None:
        """Load the embedder (off the event loop) before the first request."""
        if self._searcher is None:
            embedders = await anyio.to_thread.run_sync(self._load_embedder)
            self._embedders = embedders if isinstance(embedders, Embedders) else Embedders(embedders)
            # Queries are embedded here while the search's own thread reads the full-text index.
            self._query_embedding = ThreadPoolExecutor(QUERY_EMBEDDING_THREADS, "query-embedding")
            self._searcher = NoteSearch(self._embedders, overlap=self._query_embedding)

    def close(self) -> None:
        """Stop the query-embedding threads (searches still running finish first)."""
        if self._query_embedding is not None:
            self._query_embedding.shutdown(wait=True)

    def embedders(self) -> Embedders:
        """The embedders loaded by `start` (new vectors are made by `primary`)."""
        if self._embedders is None:
            raise RuntimeError("the AML services have not been started")
        return self._embedders

    def searcher(self) -> NoteSearch:
        if self._searcher is None:
            raise RuntimeError("the AML services have not been started")
        return self._searcher

    @staticmethod
    def holds_notes(tenant: str) -> bool:
        """Whether `tenant` is a name the notes store could hold at all."""
        try:
            validate_tenant(tenant)
        except InvalidTenantError:
            return False
        return True

    async def search(self, tenant: str, request: SearchRequest) -> list[SearchHit]:
        return await self.search_and_render(tenant, request, list)

    async def search_and_render(
        self, tenant: str, request: SearchRequest, render: Callable[[list[SearchHit]], R]
    ) -> R:
        """Search, then `render` the hits, both in one worker thread.

        Rendering fifty hits is Python work of the same order as the search itself; on the event
        loop it would stall every other request of every tenant for that long. A bank runs at most
        `searches_per_tenant` searches at once (the rest wait their turn), so one bank's burst of
        expensive queries takes its share of the CPU, not everyone's.
        """
        if not self.holds_notes(tenant):
            return render([])
        searcher = self.searcher()
        view = self.store.tenant(tenant)
        threads = self._tenant_threads.get(tenant)
        if threads is None:
            threads = self._tenant_threads[tenant] = anyio.CapacityLimiter(self._searches_per_tenant)
        try:
            return await anyio.to_thread.run_sync(
                lambda: render(searcher.search(view, request)), limiter=threads
            )
        finally:
            if threads.borrowed_tokens == 0 and threads.statistics().tasks_waiting == 0:
                self._tenant_threads.pop(tenant, None)  # an idle bank keeps no limiter
