"""The lexical half of search: which words of a query reach the full-text index, and how.

Words are runs of letters and digits only, so no FTS5 syntax (quotes, `*`, `:`, `NEAR`,
parentheses) can get through; each is quoted. Stop words and terms too common in the tenant's
own notes to move a BM25 ranking are left out.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from aml_mcp.aml.notes.model import TermStatistics

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "you",
        "your",
        "any",
        "all",
        "about",
        "show",
        "find",
        "notes",
        "note",
        "case",
        "cases",
        "related",
        "involving",
        "regarding",
    ]
)
_MAX_LEXICAL_TERMS = 32

MAX_TERM_DF_FRACTION = 0.1
"""Query terms found in more than this share of a tenant's notes are left out of the FTS query.

Their IDF is at most log(9) ~ 2.2 against >= 4.6 for terms in under 1% of notes, so they rarely
decide a top-100, yet each makes FTS5 walk a doclist of that size: at 100k notes per tenant,
keeping terms up to half the notes cost p50 ~30 ms per query, a tenth ~13 ms (top-10 overlap with
the unpruned ranking: 81%). At 10k notes the distinctive words of a note sit far below the cut."""


class TermCounts(Protocol):
    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None: ...


class CountedOnce:
    """A search's term counts, asked of the bank once: `match_expression` and `all_terms_expression`
    ask for the same words, and on the shared store every question is a round trip."""

    def __init__(self, notes: TermCounts) -> None:
        self._notes = notes
        self._asked: tuple[tuple[str, ...], TermStatistics | None] | None = None

    def document_frequencies(self, terms: Sequence[str]) -> TermStatistics | None:
        if self._asked is None or self._asked[0] != tuple(terms):
            self._asked = (tuple(terms), self._notes.document_frequencies(terms))
        return self._asked[1]


def lexical_terms(query: str) -> list[str]:
    """The query's content words, lower-cased, deduplicated, bounded in number.

    Words are runs of letters and digits only, so no FTS5 syntax (quotes, `*`, `:`, `NEAR`,
    parentheses) can get through; the store quotes each one.
    """
    words = [w for w in (m.group(0).lower() for m in _WORD.finditer(query)) if w not in _STOPWORDS]
    return list(dict.fromkeys(words))[:_MAX_LEXICAL_TERMS]


def lexical_match(query: str) -> str | None:
    """An FTS5 expression OR-ing all the query's content words, each quoted."""
    words = lexical_terms(query)
    return " OR ".join(f'"{w}"' for w in words) if words else None


def match_expression(notes: TermCounts, terms: Sequence[str]) -> str | None:
    """An FTS5 expression OR-ing the quoted `terms` that can still move a BM25 ranking.

    A term in more than `MAX_TERM_DF_FRACTION` of the tenant's notes adds little to any BM25
    score yet makes the query walk a large part of the index (a bank prefix in every note id,
    "cash" in a cash-heavy bank). Those are dropped, unless every term is that common, when
    the rarest one is kept.
    """
    clean = [t for t in dict.fromkeys(terms) if t and '"' not in t]
    if not clean:
        return None
    stats = notes.document_frequencies(clean)
    if stats is None:
        return None
    useful = [t for t in clean if 0 < stats.df[t] <= stats.documents * MAX_TERM_DF_FRACTION]
    if not useful:
        present = [t for t in clean if stats.df[t] > 0]
        if not present:
            return None
        useful = [min(present, key=lambda t: stats.df[t])]
    return " OR ".join(f'"{t}"' for t in useful)


def all_terms_expression(notes: TermCounts, terms: Sequence[str]) -> str | None:
    """An FTS5 expression AND-ing the quoted `terms`, when the query reads like the notes' own words.

    That is: at least two content words, every one of them found somewhere in the tenant's notes
    (stemmed, as the index stores them). A query typed from a note's vocabulary ("structuring
    deposits teller") then names the notes that hold all its words; a question put in other
    words (a paraphrase, a typo, another bank's jargon) almost always has a word the bank never
    uses, and gets None. The engine lifts the notes this matches above the rest, so an exact
    match of the analyst's words is never out-voted by the dense half's neighbours.
    """
    clean = [t for t in dict.fromkeys(terms) if t and '"' not in t]
    if len(clean) < 2:
        return None
    stats = notes.document_frequencies(clean)
    if stats is None or any(stats.df[t] == 0 for t in clean):
        return None
    return " AND ".join(f'"{t}"' for t in clean)
