"""AML case notes: ingestion, tenant-partitioned storage, hybrid search and the demo corpus.

Plain library code with no MCP wiring: the tool layer hands in the verified tenant and a store.
"""
