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

from aml_mcp.aml.notes import normalise_identifier, normalise_name

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_MIN_ID_CHARS = 4
_MAX_ID_TOKENS = 8
"""Spaced ids (IBANs are printed in groups of four) span up to this many tokens."""
_MAX_CANDIDATES = 160


def identifier_candidates(query: str) -> list[str]:
    """Normalised strings from `query` worth an exact lookup, most specific first, bounded in number."""
    tokens = _TOKEN.findall(query)
    out: dict[str, None] = {}
    whole_id = normalise_identifier(query)
    if any(ch.isdigit() for ch in whole_id) and len(whole_id) >= _MIN_ID_CHARS:
        out[whole_id] = None
    for i in range(len(tokens)):
        for size in range(1, _MAX_ID_TOKENS + 1):
            if i + size > len(tokens):
                break
            norm = normalise_identifier("".join(tokens[i : i + size]))
            if any(ch.isdigit() for ch in norm) and len(norm) >= _MIN_ID_CHARS:
                out[norm] = None
    words = [t for t in tokens if not any(ch.isdigit() for ch in t)]
    whole_name = normalise_name(query)
    if whole_name:
        out[whole_name] = None
    for size in (4, 3, 2):
        for i in range(len(words) - size + 1):
            out[normalise_name(" ".join(words[i : i + size]))] = None
    return list(out)[:_MAX_CANDIDATES]
