"""Whether strings in a draft are identifiers of *another* tenant's notes — answered yes/no only.

Why: a SAR must never carry another bank's customer, account or case, whoever drafted it (a
plugged-in model could have seen it elsewhere; an analyst could paste it). The notes store keeps
every tenant's identifiers normalised (`note_identifiers`); this module asks it, for a set of
candidate values, which ones occur under some other tenant and nowhere in the caller's own notes.
A value the caller's own notes carry is never foreign, even if another bank has it too (two
banks may share a customer name). The answer is a set of the caller's own candidates: no other
tenant's value, name or count ever leaves this module.

The notes store has no cross-tenant read by design, so this reads its file through a separate
read-only connection; only this module does so.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Collection, Iterable
from pathlib import Path

from aml_mcp.aml.notes.model import normalise_identifier, normalise_name
from aml_mcp.store.text import storable

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*[A-Za-z0-9]|[A-Za-z0-9]")
_CAPITALISED = re.compile(r"^[A-Z][A-Za-z'.-]*$")
_MAX_ID_TOKENS = 8
_MIN_ID_CHARS = 4
_MAX_NAME_TOKENS = 5
_CHUNK = 500


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


class IdentifierDirectory:
    """Read-only lookups in the notes database's identifier index, across tenants."""

    def __init__(self, notes_db: Path) -> None:
        self._path = notes_db

    def foreign(self, tenant: str, values: Collection[str]) -> set[str]:
        """Those of `values` (normalised) found in another tenant's notes and not in `tenant`'s own."""
        values = [value for value in values if storable(value)]  # no note holds the others
        if not values or not self._path.exists():
            return set()
        conn = sqlite3.connect(f"file:{self._path}?mode=ro", uri=True, timeout=30)
        try:
            rows = conn.execute("SELECT tenant_id, name FROM tenants").fetchall()
            own = [int(r[0]) for r in rows if r[1] == tenant]
            others = [int(r[0]) for r in rows if r[1] != tenant]
            found_elsewhere = self._present(conn, others, values)
            if not found_elsewhere:
                return set()
            return found_elsewhere - self._present(conn, own, found_elsewhere)
        finally:
            conn.close()

    @staticmethod
    def _present(conn: sqlite3.Connection, tenant_ids: list[int], values: Collection[str]) -> set[str]:
        """Values present under any of `tenant_ids` (one indexed probe per tenant and chunk)."""
        found: set[str] = set()
        ordered = sorted(values)
        for tenant_id in tenant_ids:
            for start in range(0, len(ordered), _CHUNK):
                chunk = ordered[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                sql = (
                    f"SELECT DISTINCT value FROM note_identifiers WHERE tenant_id = ? AND value IN ({marks})"  # noqa: S608
                )
                found.update(str(r[0]) for r in conn.execute(sql, [tenant_id, *chunk]))
        return found
