"""AML case notes: ingestion, tenant-partitioned storage, hybrid search and the demo corpus.

Plain library code with no MCP wiring: the tool layer hands in the verified tenant and a store.
What the composition root and the tools call:

* `store.NoteStore.open(data_dir)` -> the notes database (`<data_dir>/notes.db`, WAL); one per
  process, thread-safe; `store.tenant(principal.tenant)` -> `TenantNotes`, the only door to a
  bank's notes (search, case notes, iteration).
* `embeddings.StaticEmbedder.load()` -> the shipped embedder (numpy only, no network); load once.
* `search.NoteSearch(embedder).search(tenant_notes, search.SearchRequest(...))` ->
  `list[search.SearchHit]`; `SearchRequest` is the tool's input schema, `SearchHit` its output.
* `ingest.ingest_file(path, tenant, store, embedder)` -> `IngestReport`;
  `ingest.run_ingest(path, tenant, data_dir)` -> exit code, for `aml-mcp ingest`.
* `demo.load_demo(store, embedder, notes_per_tenant=...)` on first `serve`;
  `demo.generate(...)` for the labelled query set; `metrics` for recall@k / nDCG@k.
"""

import os

# Dense search is one small matrix-vector product per query: a second BLAS thread only burns CPU
# (measured: the same wall time at twice the CPU on the 2-core machines). Set before numpy loads;
# an operator's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
