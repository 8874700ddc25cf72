"""GenerationCache: what both notes stores remember per bank holds exactly until the bank's next write."""

from __future__ import annotations

import numpy as np

from aml_mcp.aml.notes.cache import GenerationCache
from aml_mcp.aml.notes.vectors import VectorRow


def _rows(count: int) -> list[VectorRow]:
    vector = np.ones(4, np.float16).tobytes()
    return [(rowid, vector, float(rowid), "CASE-1", "|structuring|") for rowid in range(1, count + 1)]


def test_vectors_are_loaded_once_per_generation() -> None:
    cache = GenerationCache()
    loads: list[int] = []

    def load(generation: int, count: int) -> tuple[int, str | None, list[VectorRow]]:
        loads.append(generation)
        return generation, f"space-{generation}", _rows(count)

    first = cache.vectors(7, 1, lambda: load(1, 2))
    assert cache.vectors(7, 1, lambda: load(1, 2)) is first
    moved = cache.vectors(7, 2, lambda: load(2, 3))
    assert loads == [1, 2]
    assert (first.generation, len(first.rowids)) == (1, 2)
    assert (moved.generation, len(moved.rowids)) == (2, 3)
    assert list(moved.typology_rows["structuring"]) == [0, 1, 2]
    assert (first.space, moved.space) == ("space-1", "space-2")  # the space read with the rows


def test_a_load_may_answer_a_newer_generation_than_the_one_checked() -> None:
    cache = GenerationCache()
    loaded = cache.vectors(7, 1, lambda: (2, "s", _rows(1)))  # written between the check and the read
    assert loaded.generation == 2
    assert cache.vectors(7, 2, lambda: (3, "s", _rows(5))) is loaded


def test_only_terms_not_yet_counted_are_counted_and_a_write_starts_over() -> None:
    cache = GenerationCache()
    asked: list[list[str]] = []
    documents: list[int] = []

    def count(terms: list[str]) -> list[int]:
        asked.append(terms)
        return [len(term) for term in terms]

    def stats(generation: int, terms: list[str]) -> tuple[int, dict[str, int]]:
        def notes() -> int:
            documents.append(generation)
            return 10

        found = cache.document_frequencies(3, generation, terms, documents=notes, count=count)
        return found.documents, found.df

    assert stats(1, ["cash", "wire", "cash"]) == (10, {"cash": 4, "wire": 4})
    assert stats(1, ["wire", "teller"]) == (10, {"wire": 4, "teller": 6})
    assert asked == [["cash", "wire"], ["teller"]] and documents == [1]
    stats(2, ["wire"])
    assert asked[-1] == ["wire"] and documents == [1, 2]


def test_past_its_bound_a_bank_counts_again_and_answers_every_term() -> None:
    cache = GenerationCache(df_limit=2)

    def count(terms: list[str]) -> list[int]:
        return [1 for _ in terms]

    cache.document_frequencies(3, 1, ["a", "b"], documents=lambda: 5, count=count)
    found = cache.document_frequencies(3, 1, ["a", "c"], documents=lambda: 5, count=count)
    assert found.df == {"a": 1, "c": 1}
