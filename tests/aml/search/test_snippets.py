"""Snippets show the densest window of query words, marked, and never lose the note's words."""

from __future__ import annotations

from aml_mcp.aml.search.snippets import highlight


def test_marks_words_and_their_inflections() -> None:
    text = "The customer deposited cash twice. Deposits were cashed at two branches."
    out = highlight(text, ["deposits", "cash"], words=50)
    assert out.startswith("The customer **deposited** **cash**")
    assert "**Deposits**" in out and "**cashed**" in out
    assert "branches." in out


def test_window_moves_to_the_densest_run() -> None:
    filler = " ".join(f"w{i}" for i in range(60))
    text = f"{filler} tumbler mixer tumbler {filler}"
    out = highlight(text, ["tumbler", "mixer"], words=10)
    assert out.startswith("… ") and out.endswith(" …")
    assert out.count("**tumbler**") == 2 and "**mixer**" in out


def test_no_match_gives_the_opening_words() -> None:
    text = " ".join(f"word{i}" for i in range(40))
    assert highlight(text, ["absent"], words=5) == "word0 word1 word2 word3 word4 …"
    assert highlight("short note", [], words=5) == "short note"
