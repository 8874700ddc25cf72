"""Whether strings in a draft are identifiers of *another* tenant's notes — answered yes/no only.

Why: a SAR must never carry another bank's customer, account or case, whoever drafted it (a
plugged-in model could have seen it elsewhere; an analyst could paste it). The notes store keeps
every tenant's identifiers normalised (`note_identifiers`); this module asks it, for a set of
candidate values, which ones occur under some other tenant and nowhere in the caller's own notes.
A value the caller's own notes carry is never foreign, even if another bank has it too (two
banks may share a customer name). The answer is a set of the caller's own candidates: no other
tenant's value, name or count ever leaves this module.

The notes store has no cross-tenant read by design; the one lookup across tenants is each
backend's `ForeignIdentifiers` (`aml/notes/storage/`), which answers exactly this question.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aml_mcp.aml.notes.model import normalise_identifier, normalise_name

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_CAPITALISED = re.compile(r"^[A-Z][A-Za-z'.-]*$")
_MAX_ID_TOKENS = 8
_MIN_ID_CHARS = 4
_MAX_NAME_TOKENS = 5


def draft_candidates(texts: Iterable[str], names: Iterable[str] = ()) -> set[str]:
    """Normalised values worth looking up: digit-bearing token runs, capitalised word runs, names.

    An identifier run starts and ends with a token holding a digit (`ACC-0012`, `GB29 HRBT ... 73`),
    which keeps the candidates of a long narrative to a few per number instead of eight per word.
    """
    out: set[str] = set()
    for text in texts:
        tokens = _TOKEN.findall(text)
        digits = [any(ch.isdigit() for ch in token) for token in tokens]
        for i in range(len(tokens)):
            if not digits[i]:
                continue
            for end in range(i, min(i + _MAX_ID_TOKENS, len(tokens))):
                if digits[end]:
                    value = normalise_identifier("".join(tokens[i : end + 1]))
                    if len(value) >= _MIN_ID_CHARS:
                        out.add(value)
        words = text.split()
        for i in range(len(words)):
            for size in range(2, _MAX_NAME_TOKENS + 1):
                window = [w.strip(",;:()[]\"'") for w in words[i : i + size]]
                if len(window) < size or not all(_CAPITALISED.fullmatch(w) for w in window):
                    break
                out.add(normalise_name(" ".join(window)))
    for name in names:
        out.add(normalise_name(name))
        out.add(normalise_identifier(name))
    out.discard("")
    return out
