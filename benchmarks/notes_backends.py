"""Case-notes search on SQLite and on PostgreSQL, in the same run: quality and latency.

    .venv/bin/python benchmarks/notes_backends.py [--notes 2000]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

Loads the demo corpus (3 banks x `--notes`, static embedder, so it runs in seconds) into each
backend, then runs every labelled demo query through `NoteSearch.rank_ids`, lexical-only and
hybrid, in this process (no HTTP: the figure is the store and the engine). Prints the load time,
p50/p95 latency and nDCG@10 per query kind. The PostgreSQL schema is dropped at the end. On a
shared 2-core machine, compare the rows of one run with each other, not with another run's.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from pathlib import Path

import psycopg
from psycopg import sql

from aml_mcp.aml.demo.corpus import TENANTS, DemoCorpus, generate
from aml_mcp.aml.evaluation.metrics import ndcg_at_k
from aml_mcp.aml.ingest import write_notes
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.aml.notes.storage.sqlite import SqliteNotes
from aml_mcp.aml.search.embeddings import StaticEmbedder
from aml_mcp.aml.search.engine import NoteSearch, SearchMode, SearchRequest
from aml_mcp.store.postgres import PostgresDatabase


def measure(store: NotesBackend, label: str, corpus: DemoCorpus, embedder: StaticEmbedder) -> None:
    search = NoteSearch(embedder)
    started = time.monotonic()
    for tenant in TENANTS:
        write_notes(store, tenant.name, [d.note for d in corpus.notes[tenant.name]], embedder)
    loaded = time.monotonic() - started
    for mode in (SearchMode.LEXICAL, SearchMode.HYBRID):
        quality: dict[str, list[float]] = {}
        latency: list[float] = []
        for query in corpus.queries:
            view = store.tenant(query.tenant)
            begun = time.perf_counter()
            ranked = search.rank_ids(view, SearchRequest(query=query.text, top_k=10), mode)
            latency.append((time.perf_counter() - begun) * 1000)
            quality.setdefault(query.kind, []).append(ndcg_at_k(ranked, query.relevance, 10))
        latency.sort()
        kinds = " ".join(f"{k}={statistics.mean(v):.3f}" for k, v in sorted(quality.items()))
        print(
            f"{label:8s} {mode.value:8s} load {loaded:5.1f} s  p50 {latency[len(latency) // 2]:6.2f} ms"
            f"  p95 {latency[int(len(latency) * 0.95)]:6.2f} ms  nDCG@10 {kinds}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notes", type=int, default=2000, help="notes per bank")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("AML_MCP_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    corpus = generate(args.notes, exact_per_kind=20)
    embedder = StaticEmbedder.load()
    with tempfile.TemporaryDirectory() as directory, SqliteNotes.open(Path(directory)) as local:
        measure(local, "sqlite", corpus, embedder)
    schema = f"bench_{secrets.token_hex(6)}"
    try:
        with PostgresNotes(PostgresDatabase(args.database_url, schema=schema)) as shared:
            measure(shared, "postgres", corpus, embedder)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


if __name__ == "__main__":
    main()
