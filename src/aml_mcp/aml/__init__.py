"""The AML domain: case notes, tenant-partitioned storage, hybrid search, SAR drafting, evaluation.

Sub-packages by concern, each plain library code that knows nothing of MCP requests:

* `notes/`: the note model and its normalisers (`model`), a bank's vectors in memory and their
  per-generation cache, and `storage`, the protocols every caller uses (a store's
  `tenant(verified_tenant)` is the only door to a bank's notes) with the SQLite store (one FTS
  index per bank) and the PostgreSQL one (one partition per bank, shared by replicas);
  `ingest` loads JSONL.
* `search/`: the hybrid engine (BM25 + dense cosine, fused, exact-identifier boosts).
* `sar/`: a case's facts, the drafter, the code checks, the questions asked of the analyst.
* `evaluation/`: the full evaluation, its metrics, labelled queries and stored baselines.
* `demo/`: the synthetic demo banks loaded on a first start.
* `tools/`: the MCP face — the three tools' `ToolSpec`s and the service their bodies call.

The seam for a bank's own SAR writer is `Drafter` (configured as `aml.drafter = "module:factory"`).
"""

import os

# Dense search is one small matrix-vector product per query: a second BLAS thread only burns CPU
# (measured: the same wall time at twice the CPU on the 2-core machines). Set before numpy loads
# (the imports below load it); an operator's own setting wins.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from aml_mcp.aml.sar.draft import Drafter, SarDraft
from aml_mcp.aml.sar.facts import CaseFile
from aml_mcp.aml.sar.questions import AnalystFacts

__all__ = ["AnalystFacts", "CaseFile", "Drafter", "SarDraft"]
