"""Identifier candidates: the bounded computation gives exactly the straightforward definition."""

from __future__ import annotations

import random

import pytest

from aml_mcp.aml.notes.model import normalise_identifier, normalise_name
from aml_mcp.aml.search.identifiers import _MAX_CANDIDATES, _TOKEN, identifier_candidates


def reference(query: str) -> list[str]:
    """Every run of up to 8 tokens normalised on its own, every 2-4 word run; the first 160."""
    tokens = _TOKEN.findall(query)
    out: dict[str, None] = {}
    whole_id = normalise_identifier(query)
    if any(ch.isdigit() for ch in whole_id) and len(whole_id) >= 4:
        out[whole_id] = None
    for i in range(len(tokens)):
        for size in range(1, 9):
            if i + size > len(tokens):
                break
            norm = normalise_identifier("".join(tokens[i : i + size]))
            if any(ch.isdigit() for ch in norm) and len(norm) >= 4:
                out[norm] = None
    words = [t for t in tokens if not any(ch.isdigit() for ch in t)]
    whole_name = normalise_name(query)
    if whole_name:
        out[whole_name] = None
    for size in (4, 3, 2):
        for i in range(len(words) - size + 1):
            out[normalise_name(" ".join(words[i : i + size]))] = None
    return list(out)[:_MAX_CANDIDATES]


PIECES = [
    "ACC-0012", "GB29", "NWBK", "6016", "1331", "9268", "19", "john", "smith", "a", "b", "de", "la",
    "x1", "  ", "-", ",", "Ünïcode", "ß", "İstanbul", "42", "0", "ab.cd", "a_b", "12/34", ":", "1:2",
    "O'Neil", "ﬁle", "٣٤٥", "①", "Ⅻ",
]  # fmt: skip


def test_random_queries_match_the_reference() -> None:
    rng = random.Random(11)
    for _ in range(3000):
        query = " ".join(rng.choice(PIECES) for _ in range(rng.randint(0, 60)))
        if rng.random() < 0.3:
            query = query.replace(" ", rng.choice(["", "-", "  ", "/"]))
        assert identifier_candidates(query) == reference(query), query


@pytest.mark.parametrize(
    "query",
    [
        ("a b " * 250)[:1000],
        ("1 2 3 " * 170)[:1000],
        ("1111 " * 200)[:1000],
        ("ACC-12 " * 150)[:1000],
        " ".join(str(n) for n in range(400))[:1000],
        "payments from Pavel A Garcia to account GB29 NWBK 6016 1331 9268 19",
    ],
)
def test_worst_case_queries_match_the_reference_and_stay_bounded(query: str) -> None:
    found = identifier_candidates(query)
    assert found == reference(query)
    assert len(found) <= _MAX_CANDIDATES
