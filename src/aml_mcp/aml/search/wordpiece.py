"""BERT-uncased WordPiece tokenisation in plain Python, to turn text into rows of the static table.

Why not the `tokenizers` package: the static table needs only the lookup half of a tokenizer, the
rules are short and fixed (lower-case, strip accents, split on whitespace and punctuation, greedy
longest-match-first with `##` continuations), and a per-word cache makes it fast enough for
ingest; one dependency fewer in the default install.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping

_MAX_WORD_CHARS = 100
_CONTINUATION = "##"


def _is_punctuation(ch: str) -> bool:
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _is_cjk(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def basic_words(text: str) -> list[str]:
    """BERT's basic tokenizer for uncased models: the words WordPiece then splits."""
    out: list[str] = []
    current: list[str] = []

    def flush() -> None:
        if current:
            out.append("".join(current))
            current.clear()

    normalised = unicodedata.normalize("NFD", text.lower())
    for ch in normalised:
        cp = ord(ch)
        if cp == 0 or cp == 0xFFFD or unicodedata.category(ch) == "Mn":
            continue
        if ch.isspace() or unicodedata.category(ch) in {"Cc", "Cf"}:
            flush()
        elif _is_punctuation(ch) or _is_cjk(cp):
            flush()
            out.append(ch)
        else:
            current.append(ch)
    flush()
    return out


class WordPiece:
    """Greedy longest-match-first WordPiece over a fixed vocabulary.

    An unknown word yields no ids by default (the static table has no row worth averaging for
    it); with `unk_id` it yields that one id, as BERT's tokenizer does (a transformer must see
    that a word was there, or the positions of the words after it shift).
    """

    def __init__(
        self, vocab: Mapping[str, int], cache_size: int = 200_000, unk_id: int | None = None
    ) -> None:
        self._vocab = vocab
        self._cache: dict[str, tuple[int, ...]] = {}
        self._cache_size = cache_size
        self._unknown: tuple[int, ...] = () if unk_id is None else (unk_id,)

    def word_ids(self, word: str) -> tuple[int, ...]:
        cached = self._cache.get(word)
        if cached is not None:
            return cached
        ids = self._split(word)
        if len(self._cache) < self._cache_size:
            self._cache[word] = ids
        return ids

    def _split(self, word: str) -> tuple[int, ...]:
        if len(word) > _MAX_WORD_CHARS:
            return self._unknown
        ids: list[int] = []
        start = 0
        while start < len(word):
            end = len(word)
            found = None
            while start < end:
                piece = word[start:end] if start == 0 else _CONTINUATION + word[start:end]
                found = self._vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return self._unknown
            ids.append(found)
            start = end
        return tuple(ids)

    def ids(self, text: str) -> list[int]:
        """Token ids of `text` (no special tokens)."""
        out: list[int] = []
        for word in basic_words(text):
            out.extend(self.word_ids(word))
        return out

    def batch_ids(self, texts: Iterable[str]) -> list[list[int]]:
        return [self.ids(t) for t in texts]
