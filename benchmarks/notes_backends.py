"""Case-notes search on SQLite and on PostgreSQL, in the same run: quality, latency and their ratios.

    .venv/bin/python benchmarks/notes_backends.py [--notes 2000] [--rounds 3]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

Loads the demo corpus (3 banks x `--notes`, static embedder, so it runs in seconds) into each
backend (the load time is the ingest figure), then runs every labelled demo query through
`NoteSearch.rank_ids`, lexical-only and hybrid, in this process (no HTTP: the figure is the store
and the engine), `--rounds` times, the backends interleaved query by query (which goes first
alternates) so that a shared machine's load falls on both alike. The first round is cold (no
term counts or vectors in memory yet), the others warm.

Prints per round and mode the p50/p95 latency and nDCG@10 per query kind, then the acceptance
figures as medians over the rounds of each round's ratio: lexical and hybrid p50 PostgreSQL ÷
SQLite, lexical nDCG@10 for names and account ids PostgreSQL ÷ SQLite, and the hybrid nDCG@10 of
both (quality does not vary between rounds). The PostgreSQL schema is dropped at the end.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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

BACKENDS = ("sqlite", "postgres")


@dataclass(frozen=True)
class Pass:
    """One pass of every labelled query through one backend in one mode."""

    p50: float
    p95: float
    quality: dict[str, float]


def load(store: NotesBackend, corpus: DemoCorpus, embedder: StaticEmbedder) -> float:
    started = time.monotonic()
    for tenant in TENANTS:
        write_notes(store, tenant.name, [d.note for d in corpus.notes[tenant.name]], embedder)
    return time.monotonic() - started


def run(
    opened: dict[str, NotesBackend], corpus: DemoCorpus, search: NoteSearch, mode: SearchMode
) -> dict[str, Pass]:
    """Every labelled query on every backend, one query at a time on each in turn (which goes
    first alternates), so that both see the same load; one `Pass` per backend."""
    quality: dict[str, dict[str, list[float]]] = {name: {} for name in opened}
    latency: dict[str, list[float]] = {name: [] for name in opened}
    names = list(opened)
    for number, query in enumerate(corpus.queries):
        for name in names if number % 2 else names[::-1]:
            view = opened[name].tenant(query.tenant)
            begun = time.perf_counter()
            ranked = search.rank_ids(view, SearchRequest(query=query.text, top_k=10), mode)
            latency[name].append((time.perf_counter() - begun) * 1000)
            quality[name].setdefault(query.kind, []).append(ndcg_at_k(ranked, query.relevance, 10))
    passes = {}
    for name, times in latency.items():
        times.sort()
        kinds = {kind: statistics.mean(values) for kind, values in sorted(quality[name].items())}
        passes[name] = Pass(times[len(times) // 2], times[int(len(times) * 0.95)], kinds)
    return passes


@contextmanager
def stores(database_url: str) -> Iterator[dict[str, NotesBackend]]:
    """Both backends, empty: SQLite in a temporary directory, PostgreSQL in a schema of its own."""
    schema = f"bench_{secrets.token_hex(6)}"
    try:
        with (
            tempfile.TemporaryDirectory() as directory,
            SqliteNotes.open(Path(directory)) as local,
            PostgresNotes(PostgresDatabase(database_url, schema=schema)) as shared,
        ):
            yield {"sqlite": local, "postgres": shared}
    finally:
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notes", type=int, default=2000, help="notes per bank")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved passes per backend and mode")
    parser.add_argument(
        "--database-url",
        default=os.environ.get("AML_MCP_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    )
    args = parser.parse_args()
    corpus = generate(args.notes, exact_per_kind=20)
    embedder = StaticEmbedder.load()
    search = NoteSearch(embedder)
    with stores(args.database_url) as opened:
        loaded = {name: load(opened[name], corpus, embedder) for name in BACKENDS}
        print(
            f"ingest of 3 x {args.notes} notes: sqlite {loaded['sqlite']:.1f} s, "
            f"postgres {loaded['postgres']:.1f} s ({loaded['postgres'] / loaded['sqlite']:.2f}x)",
            flush=True,
        )
        passes: dict[tuple[str, SearchMode], list[Pass]] = {}
        for number in range(1, args.rounds + 1):
            for mode in (SearchMode.LEXICAL, SearchMode.HYBRID):
                for name, done in run(opened, corpus, search, mode).items():
                    passes.setdefault((name, mode), []).append(done)
                    kinds = " ".join(f"{k}={v:.3f}" for k, v in done.quality.items())
                    print(
                        f"round {number} {name:8s} {mode.value:8s} p50 {done.p50:6.2f} ms"
                        f"  p95 {done.p95:6.2f} ms  nDCG@10 {kinds}",
                        flush=True,
                    )
    report(passes, args.notes)


def report(passes: dict[tuple[str, SearchMode], list[Pass]], notes: int) -> None:
    def ratios(mode: SearchMode, pick: str) -> list[float]:
        pairs = zip(passes[("postgres", mode)], passes[("sqlite", mode)], strict=True)
        return [getattr(pg, pick) / getattr(lite, pick) for pg, lite in pairs]

    def spread(values: list[float]) -> str:
        return f"{statistics.median(values):.2f}x [{min(values):.2f}-{max(values):.2f}]"

    print(f"\nacceptance at {notes} notes per bank (median [min-max] of the rounds' ratios):")
    for mode in (SearchMode.LEXICAL, SearchMode.HYBRID):
        medians = {name: statistics.median(p.p50 for p in passes[(name, mode)]) for name in BACKENDS}
        print(
            f"  {mode.value:8s} p50 sqlite {medians['sqlite']:.2f} ms, postgres {medians['postgres']:.2f} ms:"
            f" postgres / sqlite {spread(ratios(mode, 'p50'))}  (p95 {spread(ratios(mode, 'p95'))})"
        )
    lexical = {name: passes[(name, SearchMode.LEXICAL)][0].quality for name in BACKENDS}
    for kind in ("name", "account_id", "case_id", "keyword", "paraphrase"):
        lite, pg = lexical["sqlite"].get(kind, 0.0), lexical["postgres"].get(kind, 0.0)
        share = f"{pg / lite:.3f}x" if lite else "n/a"
        print(f"  lexical nDCG@10 {kind:10s} sqlite {lite:.3f}  postgres {pg:.3f}  postgres / sqlite {share}")
    hybrid = {name: passes[(name, SearchMode.HYBRID)][0].quality for name in BACKENDS}
    for kind in hybrid["sqlite"]:
        print(
            f"  hybrid  nDCG@10 {kind:10s} sqlite {hybrid['sqlite'][kind]:.3f}"
            f"  postgres {hybrid['postgres'][kind]:.3f}"
        )


if __name__ == "__main__":
    main()
