"""Is a decoded JSON body text every later layer can carry? Checked once, at the door.

JSON allows `"\\ud800"`, and Python's decoder turns it (and the raw UTF-8-encoded surrogate bytes
it accepts too) into a string that cannot be encoded as UTF-8: SQLite cannot bind it, a JSON-lines
file cannot hold it, a schema validator raises on it. Such a string is not Unicode text (RFC 8259
§8.2, RFC 7493 §2.1), so a body carrying one anywhere — method, names, URIs, task ids, argument
keys or values — is refused as a parse error before anyone reads it. Nesting is bounded here too,
so no later layer recurses on a body deeper than `max_depth`.

The walk is iterative (no recursion for an attacker to exhaust) and is skipped outright for the
common body that cannot hold either defect: ASCII with no `\\u` escape and few brackets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_SHOWN = 200


def has_lone_surrogate(text: str) -> bool:
    """Whether `text` holds a UTF-16 surrogate code point (never valid on its own in a `str`)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def escaped(text: str, limit: int = _MAX_SHOWN) -> str:
    """`text` as printable ASCII, for logs and the audit trail: every control, non-ASCII or
    surrogate character becomes its backslash escape, so what a client sent is shown, never replayed."""
    shown = text[:limit].encode("unicode_escape").decode("ascii")
    return shown + "…" if len(text) > limit else shown


@dataclass(frozen=True, slots=True)
class BodyDefect:
    """Why a decoded body is refused, and where (a JSON path, already escaped)."""

    reason: str
    """`invalid_unicode` or `nesting_too_deep`."""
    path: str
    message: str


def _path_text(keys: list[Any]) -> str:
    return "$" + "".join(f"[{key}]" if isinstance(key, int) else f".{escaped(str(key), 64)}" for key in keys)


_SURROGATE_CANDIDATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
"""Where a surrogate can come from: a `\\uD800`-`\\uDFFF` escape, or its raw UTF-8 form (which
Python's decoder lets through). A body with neither holds none (an escaped pair, as ASCII-only
encoders write emoji, matches too and is simply walked)."""


def _children(container: dict[str, Any] | list[Any]) -> Iterator[tuple[Any, Any]]:
    return iter(container.items()) if isinstance(container, dict) else enumerate(container)


def body_defect(raw: bytes, message: Any, *, max_depth: int) -> BodyDefect | None:
    """The first thing in `message` (decoded from `raw`) that no later layer may be handed, if any.

    One depth-first pass over the containers, driven by a stack of iterators: no recursion, no
    allocation per scalar, and the path to a defect is the keys of the open containers.
    """
    strings = _SURROGATE_CANDIDATE.search(raw) is not None
    if not strings and raw.count(b"{") + raw.count(b"[") <= max_depth:
        return None
    if isinstance(message, str):
        return _invalid_unicode([]) if strings and has_lone_surrogate(message) else None
    if not isinstance(message, dict | list):
        return None
    keys: list[Any] = []
    stack = [_children(message)]
    while stack:
        for key, item in stack[-1]:
            if strings:
                if isinstance(key, str) and has_lone_surrogate(key):
                    return _invalid_unicode([*keys, key])
                if isinstance(item, str) and has_lone_surrogate(item):
                    return _invalid_unicode([*keys, key])
            if isinstance(item, dict | list):
                if len(stack) >= max_depth:
                    return BodyDefect(
                        "nesting_too_deep",
                        _path_text(keys[:8]) + ("…" if len(keys) > 8 else ""),
                        f"Parse error: the body nests deeper than {max_depth} levels",
                    )
                if item:
                    keys.append(key)
                    stack.append(_children(item))
                    break
        else:
            stack.pop()
            if keys:
                keys.pop()
    return None


def _invalid_unicode(keys: list[Any]) -> BodyDefect:
    where = _path_text(keys)
    return BodyDefect(
        "invalid_unicode",
        where,
        f"Parse error: the body is not valid Unicode text (a lone surrogate at {where})",
    )
