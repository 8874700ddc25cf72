"""What a notes store keeps in memory per bank until the bank's next write, written once.

A search reads a bank's whole vector matrix and the document frequencies of its query's words;
both are costly to rebuild (the matrix is every note's embedding) and both stay true until the bank
changes. Every write moves the bank's `generation` counter (in the writing transaction), so a
value remembered with the generation it was read at is valid exactly while the bank's counter
still says that number. Both stores keep their caches here and only answer the bank's current
generation and return rows; neither store's bank view touches the other's bookkeeping.

Thread-safe: searches of one bank run in several worker threads at once. Loading runs outside
the lock (a large bank's matrix takes a while), so two threads may both load a stale bank; the
later one's result stays, which is as good.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar, cast

from aml_mcp.aml.notes.model import TenantVectors, TermStatistics
from aml_mcp.aml.notes.vectors import VectorRow, load_vectors

TotalsT = TypeVar("TotalsT")
TermT = TypeVar("TermT")

DF_CACHE_SIZE = 50_000
"""Term counts one bank keeps at most; past that its counts start over (a bound, not an LRU: a
bank's queries reuse a small vocabulary, so the bound is only met by a flood of distinct words)."""


@dataclass(slots=True)
class _LexicalStats:
    """One bank's totals (its note count, or what a store keeps for BM25) and what it knows of each
    term, valid for one generation."""

    generation: int
    totals: object
    terms: dict[str, object]


class GenerationCache:
    """Per-bank vectors and document frequencies, keyed by the store's integer bank id."""

    def __init__(self, *, df_limit: int = DF_CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._df_limit = df_limit
        self._vectors: dict[int, TenantVectors] = {}
        self._stats: dict[int, _LexicalStats] = {}

    def vectors(
        self, bank: int, generation: int, load: Callable[[], tuple[int, str | None, Sequence[VectorRow]]]
    ) -> TenantVectors:
        """The bank's vectors at `generation`: the remembered ones if they are that generation's,
        else built from `load()` and remembered. `load` returns the generation it read with its
        rows (read together, so it may be newer than `generation`), the bank's vector space then
        and the rows in row order."""
        with self._lock:
            cached = self._vectors.get(bank)
        if cached is not None and cached.generation == generation:
            return cached
        loaded_generation, space, rows = load()
        loaded = load_vectors(loaded_generation, rows, space)
        with self._lock:
            self._vectors[bank] = loaded
        return loaded

    def document_frequencies(
        self,
        bank: int,
        generation: int,
        terms: Sequence[str],
        *,
        documents: Callable[[], int],
        count: Callable[[list[str]], Sequence[int]],
    ) -> TermStatistics:
        """How many of the bank's notes hold each of `terms`, and how many notes it has, at
        `generation`. Only what is not remembered is asked: `documents()` once per generation,
        `count(missing)` (one count per term, in order) for the terms not counted yet."""
        total, df = self.term_statistics(bank, generation, terms, totals=documents, count=count)
        return TermStatistics(total, {term: int(n) for term, n in df.items()})

    def term_statistics(
        self,
        bank: int,
        generation: int,
        terms: Sequence[str],
        *,
        totals: Callable[[], TotalsT],
        count: Callable[[list[str]], Sequence[TermT]],
    ) -> tuple[TotalsT, dict[str, TermT]]:
        """The bank's totals and what is known of each of `terms` at `generation`, asking only
        what is not remembered: `totals()` once per generation, `count(missing)` (one value per
        term, in order) for the terms not asked yet. A bank keeps one kind of value: a store asks
        its cache with the same callables every time."""
        with self._lock:
            stats = self._stats.get(bank)
        if stats is None or stats.generation != generation:
            stats = _LexicalStats(generation, totals(), {})
            with self._lock:
                self._stats[bank] = stats
        with self._lock:
            found = {term: stats.terms[term] for term in terms if term in stats.terms}
        missing = [term for term in dict.fromkeys(terms) if term not in found]
        if missing:
            counted: dict[str, object] = dict(zip(missing, count(missing), strict=True))
            found.update(counted)
            with self._lock:  # another search of the bank may be adding terms too
                if len(stats.terms) + len(counted) > self._df_limit:
                    stats.terms.clear()
                stats.terms.update(counted)
        return cast(TotalsT, stats.totals), {term: cast(TermT, found[term]) for term in terms}

    def remembered(self, bank: int, terms: Sequence[str]) -> tuple[int, object, dict[str, object]] | None:
        """(generation, totals, each term's value) as last read for `bank` when every one of `terms`
        was read then, else None. The generation is not checked here: a caller that uses them
        checks, in the statement that reads with them, that the bank is still at it."""
        with self._lock:
            stats = self._stats.get(bank)
            if stats is None or any(term not in stats.terms for term in terms):
                return None
            return stats.generation, stats.totals, {term: stats.terms[term] for term in terms}


__all__ = ["DF_CACHE_SIZE", "GenerationCache"]
