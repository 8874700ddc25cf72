"""Highlighted snippets: the window of a note's text where the query's words are densest.

Why not FTS5 `snippet()`: it needs the full-text query evaluated again over the tenant's whole
index just to decorate ten rows (7 ms at 100k notes per tenant), and it has nothing to show for a
note found by meaning alone. Here the text is already in hand, so a sliding window over its words
costs microseconds. Word matching approximates the index's Porter stemming by a shared prefix
(`deposit` matches `deposits`, `cash` matches `cashed`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_CORE = re.compile(r"[^\w]+")
_MIN_PREFIX = 4


def _matches(word: str, terms: Sequence[str]) -> bool:
    core = _CORE.sub("", word.lower())
    if not core:
        return False
    for term in terms:
        if core == term:
            return True
        stem = term[: max(_MIN_PREFIX, len(term) - 2)]
        if len(term) >= _MIN_PREFIX and core.startswith(stem) and len(core) - len(stem) <= 4:
            return True
    return False


def highlight(text: str, terms: Sequence[str], words: int = 24, mark: tuple[str, str] = ("**", "**")) -> str:
    """Up to `words` words of `text` around the densest run of `terms`, each match wrapped in `mark`.

    With no match (a note found by meaning only), the opening words, unmarked.
    """
    tokens = text.split()
    hits = [_matches(t, terms) for t in tokens] if terms else [False] * len(tokens)
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
