"""Highlighted snippets: the window of a note's text where the query's words are densest.

Why not FTS5 `snippet()`: it needs the full-text query evaluated again over the tenant's whole
index just to decorate ten rows (7 ms at 100k notes per tenant), and it has nothing to show for a
note found by meaning alone. Here the text is already in hand, so a sliding window over its words
costs microseconds. Word matching approximates the index's Porter stemming by a shared prefix
(`deposit` matches `deposits`, `cash` matches `cashed`).
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence

_PUNCTUATION = string.punctuation + "\u201c\u201d\u2018\u2019\u2026\u00ab\u00bb"
_MIN_PREFIX = 4


class Highlighter:
    """Built once per query (one compiled pattern for all its terms), applied to each hit."""

    def __init__(self, terms: Sequence[str], words: int = 24, mark: tuple[str, str] = ("**", "**")) -> None:
        options = []
        for term in dict.fromkeys(terms):
            if len(term) >= _MIN_PREFIX:
                options.append(re.escape(term[: max(_MIN_PREFIX, len(term) - 2)]) + r"\w{0,4}")
            elif term:
                options.append(re.escape(term))
        self._pattern = re.compile("|".join(options), re.IGNORECASE) if options else None
        self._words = words
        self._mark = mark

    def __call__(self, text: str) -> str:
        """Up to `words` words of `text` around the densest run of terms, each match marked.

        With no match (a note found by meaning only), the opening words, unmarked.
        """
        words, mark = self._words, self._mark
        tokens = text.split()
        if self._pattern is None:
            hits = [False] * len(tokens)
        else:
            fullmatch = self._pattern.fullmatch
            hits = [fullmatch(t.strip(_PUNCTUATION)) is not None for t in tokens]
        start = 0
        if any(hits) and len(tokens) > words:
            best = -1
            count = sum(hits[:words])
            for i in range(len(tokens) - words + 1):
                if i:
                    count += hits[i + words - 1] - hits[i - 1]
                if count > best:
                    best, start = count, i
            first = next(i for i in range(start, start + words) if hits[i])
            start = max(0, min(first - 3, len(tokens) - words))
        window = tokens[start : start + words]
        shown = [f"{mark[0]}{t}{mark[1]}" if hits[start + i] else t for i, t in enumerate(window)]
        prefix = "… " if start > 0 else ""
        suffix = " …" if start + words < len(tokens) else ""
        return prefix + " ".join(shown) + suffix


def highlight(text: str, terms: Sequence[str], words: int = 24, mark: tuple[str, str] = ("**", "**")) -> str:
    """One-off form of `Highlighter(terms, words, mark)(text)`."""
    return Highlighter(terms, words, mark)(text)
