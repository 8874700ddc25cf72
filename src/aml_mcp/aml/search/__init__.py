"""Hybrid search over one bank's notes: lexical (BM25), dense (embeddings), fused, identifiers first."""
