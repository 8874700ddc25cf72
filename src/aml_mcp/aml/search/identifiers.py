"""Spotting identifiers in a free-text query: account ids, case and note ids, person names.

Why: an analyst who types an account number or a customer's name wants that note first, and
neither BM25 (which splits `ACC-0012` into pieces and weighs them like words) nor embeddings
(which know nothing of account numbers) reliably put it there. So a query's candidate identifiers
are looked up exactly in the tenant's identifier index and matches are boosted above everything.
Candidates are generous (every run of up to 8 tokens holding a digit, every 2-4 word run): a
candidate that is no identifier simply finds nothing.
"""

from __future__ import annotations

import re

from aml_mcp.aml.notes.model import normalise_identifier, normalise_name

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_MIN_ID_CHARS = 4
_MAX_ID_TOKENS = 8
"""Spaced ids (IBANs are printed in groups of four) span up to this many tokens."""
_MAX_CANDIDATES = 160


def identifier_candidates(query: str) -> list[str]:
    """Normalised strings from `query` worth an exact lookup, most specific first, bounded in number.

    Compute once per query (the search and the rendering of its hits share the result). The
    work is bounded by the query's length: each token is normalised once and runs are built by
    joining normalised tokens (normalising a run equals joining its normalised tokens), only runs
    that hold a digit are built for identifiers, and generation stops at `_MAX_CANDIDATES`.
    """
    tokens = _TOKEN.findall(query)
    out: dict[str, None] = {}
    whole_id = normalise_identifier(query)
    if any(ch.isdigit() for ch in whole_id) and len(whole_id) >= _MIN_ID_CHARS:
        out[whole_id] = None
    pieces = [normalise_identifier(token) for token in tokens]
    digits = [any(ch.isdigit() for ch in piece) for piece in pieces]
    following_digit = len(tokens)  # index of the nearest token at or after i that holds a digit
    starts: list[int] = [0] * len(tokens)
    for i in range(len(tokens) - 1, -1, -1):
        if digits[i]:
            following_digit = i
        starts[i] = following_digit
    for i in range(len(tokens)):
        if len(out) >= _MAX_CANDIDATES:
            return list(out)[:_MAX_CANDIDATES]
        first_digit = starts[i]
        if first_digit >= i + _MAX_ID_TOKENS:
            continue  # no run of up to _MAX_ID_TOKENS tokens from here holds a digit
        run = "".join(pieces[i:first_digit])
        for end in range(first_digit, min(i + _MAX_ID_TOKENS, len(tokens))):
            run += pieces[end]
            if len(run) >= _MIN_ID_CHARS:
                out[run] = None
    words = [normalise_name(t) for t in tokens if not any(ch.isdigit() for ch in t)]
    whole_name = normalise_name(query)
    if whole_name:
        out[whole_name] = None
    for size in (4, 3, 2):
        for i in range(len(words) - size + 1):
            if len(out) >= _MAX_CANDIDATES:
                return list(out)[:_MAX_CANDIDATES]
            out[" ".join(words[i : i + size])] = None
    return list(out)[:_MAX_CANDIDATES]
