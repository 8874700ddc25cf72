"""BM25 as SQLite's FTS5 computes it, for a store that ranks outside FTS5 (the PostgreSQL notes).

The formula is FTS5's `bm25()` with the weights the SQLite store passes (`bm25(fts, 1.0, 1.5, 1.5)`:
the text 1, the subjects and the identifiers 1.5 each), so a bank's scores mean the same on both
backends:

    score(note) = sum over the query's terms t of
        idf(t) * f(t) * (K1 + 1) / (f(t) + K1 * (1 - B + B * length / average length))

where `f(t)` is the term's weighted frequency in the note (each occurrence counts its column's
weight), `length` the note's tokens over all three columns, and `idf(t) = ln((N - df + 0.5) /
(df + 0.5))` (1e-6 where that is not positive) from the bank's own note count `N` and the term's
document frequency `df`.

Why a candidate plan: scoring a note costs a row read, so a store that scores every note holding
any query word (what `ts_rank_cd` did on PostgreSQL) costs time in proportion to the bank. A term
adds at most `bound` to any note's score (`TermStats.bound`: its idf times the saturation of the
largest weighted frequency it has in a note of the shortest length it occurs in), so a note holding
the terms `S` scores at most `sum(bound of S)`. `plan_candidates` picks the lowest threshold whose
expected candidates fit a budget and writes "bound sum >= threshold" as an OR of ANDs of terms; the
store scores only the notes that match it, and every note scoring at least the threshold is among
them: that head of the ranking is exact. Below it the store fills up with scored notes that merely
hold a term (`CandidatePlan.exact` says where the exact part ends).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

K1 = 1.2
B = 0.75
TEXT_WEIGHT = 1.0
"""Weight of an occurrence in the note's text (FTS5 column `text`)."""
SUBJECT_WEIGHT = 1.5
"""Weight of an occurrence in the subjects or the identifiers (FTS5 columns `subjects`, `identifiers`)."""
MAX_PLANNED_TERMS = 6
"""Terms a candidate condition is written over (the highest bounds); the others' bounds are slack.
Six terms give at most 20 clauses (the middle binomial), which keeps the index's per-posting check cheap."""


def idf(documents: int, df: int) -> float:
    """FTS5's inverse document frequency: ln((N - df + 0.5) / (df + 0.5)), at least 1e-6."""
    value = math.log((documents - df + 0.5) / (df + 0.5))
    return value if value > 0 else 1e-6


def saturation(frequency: float, length: float, average_length: float) -> float:
    """The BM25 term-frequency factor of a weighted `frequency` in a note of `length` tokens."""
    if frequency <= 0:
        return 0.0
    norm = K1 * (1 - B + B * length / average_length) if average_length > 0 else K1
    return frequency * (K1 + 1) / (frequency + norm)


@dataclass(frozen=True, slots=True)
class BankTotals:
    """A bank's note count and its notes' tokens summed (what the average length comes from)."""

    documents: int
    tokens: int

    @property
    def average_length(self) -> float:
        return self.tokens / self.documents if self.documents else 0.0


@dataclass(frozen=True, slots=True)
class TermStats:
    """What a store keeps of one term in one bank: its document frequency and, for the bound, the
    largest weighted frequency it has in a note and the shortest note holding it (None: unknown,
    the bound is then the limit `idf * (K1 + 1)`). Both only ever widen as notes are written, so a
    value kept across deletions is still a bound."""

    df: int
    max_frequency: float | None = None
    min_length: int | None = None

    def idf(self, bank: BankTotals) -> float:
        return idf(bank.documents, self.df)

    def bound(self, bank: BankTotals) -> float:
        """The most this term adds to any note's score in `bank`."""
        if self.df <= 0:
            return 0.0
        weight = self.idf(bank)
        if self.max_frequency is None or self.min_length is None:
            return weight * (K1 + 1)
        return weight * saturation(self.max_frequency, self.min_length, bank.average_length)


@dataclass(frozen=True, slots=True)
class CandidatePlan:
    """Which notes a store scores for a query: those holding every term of at least one clause
    (term positions in the query), and the score from which that set is complete."""

    clauses: tuple[tuple[int, ...], ...]
    threshold: float
    """Every note scoring at least this is a candidate; 0 when every note holding a term is."""
    expected: float
    """How many candidates the plan expects (the terms' document frequencies summed, for 0)."""

    def exact(self, scores: Sequence[float], complete: bool = True) -> int:
        """How many of `scores` (best first, from the candidates) are certainly the bank's best:
        all of them when the plan took every note holding a term, else those at or above the
        threshold; none when the store could not score every candidate (`complete` False)."""
        if not complete:
            return 0
        if self.threshold <= 0:
            return len(scores)
        return sum(1 for score in scores if score >= self.threshold)


def plan_candidates(terms: Sequence[TermStats], bank: BankTotals, budget: int) -> CandidatePlan:
    """The cheapest exact plan when its notes fit `budget`, else the lowest threshold whose expected
    candidates do (estimated as if the terms occurred independently; the store caps the rows it
    reads, so an underestimate costs completeness, not time).

    A note holding the terms `S` scores at most the sum of their bounds, so "bound sum >= v" over
    the planned terms, with the other terms' bounds as slack, keeps every note scoring at least
    `v + slack`: that is the plan's threshold."""
    present = [i for i, term in enumerate(terms) if term.df > 0]
    every = sum(terms[i].df for i in present)
    if every <= budget or len(present) == 1:
        return CandidatePlan(tuple((i,) for i in present), 0.0, every)
    bounds = {i: terms[i].bound(bank) for i in present}
    ordered = sorted(present, key=lambda i: (-bounds[i], i))
    planned, rest = ordered[:MAX_PLANNED_TERMS], ordered[MAX_PLANNED_TERMS:]
    slack = sum(bounds[i] for i in rest)
    chance = {i: min(1.0, terms[i].df / bank.documents) if bank.documents else 1.0 for i in planned}
    # Every subset of the planned terms: its bound sum and how many notes hold exactly it.
    subsets: list[tuple[float, float]] = []
    for size in range(1, len(planned) + 1):
        for chosen in itertools.combinations(planned, size):
            inside = set(chosen)
            share = math.prod(chance[i] if i in inside else 1 - chance[i] for i in planned)
            subsets.append((sum(bounds[i] for i in chosen), share * bank.documents))
    subsets.sort(key=lambda item: -item[0])
    level, expected, running = subsets[0][0], subsets[0][1], 0.0  # the AND of every planned term at least
    for total, notes in subsets:
        running += notes
        if running > budget:
            break
        level, expected = total, running
    if level <= min(bounds[i] for i in planned) and not rest:
        return CandidatePlan(tuple((i,) for i in present), 0.0, every)
    return CandidatePlan(_minimal_sets(planned, bounds, level), level + slack, expected)


def plan_expression(every: bool, terms: Sequence[TermStats], bank: BankTotals, budget: int) -> CandidatePlan:
    """The plan for an expression of `terms`: for an AND (`every`), the notes holding all of them
    (none when a term is in no note); for an OR, `plan_candidates`."""
    if not every:
        return plan_candidates(terms, bank, budget)
    if any(term.df <= 0 for term in terms):
        return CandidatePlan((), 0.0, 0.0)
    return CandidatePlan((tuple(range(len(terms))),), 0.0, min(term.df for term in terms))


def _minimal_sets(
    planned: Sequence[int], bounds: dict[int, float], level: float
) -> tuple[tuple[int, ...], ...]:
    """The smallest sets of `planned` terms (in order of falling bound) whose bounds reach `level`:
    a note reaches it exactly when it holds every term of one of them."""
    found: list[tuple[int, ...]] = []
    remaining = [sum(bounds[i] for i in planned[k:]) for k in range(len(planned) + 1)]

    def extend(start: int, chosen: tuple[int, ...], total: float) -> None:
        for k in range(start, len(planned)):
            if total + remaining[k] < level:
                return
            term = planned[k]
            grown = total + bounds[term]
            if grown >= level:
                found.append((*chosen, term))
            else:
                extend(k + 1, (*chosen, term), grown)

    extend(0, (), 0.0)
    return tuple(sorted(found, key=lambda clause: (len(clause), clause)))


__all__ = [
    "K1",
    "MAX_PLANNED_TERMS",
    "SUBJECT_WEIGHT",
    "TEXT_WEIGHT",
    "B",
    "BankTotals",
    "CandidatePlan",
    "TermStats",
    "idf",
    "plan_candidates",
    "plan_expression",
    "saturation",
]
