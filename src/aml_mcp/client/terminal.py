"""Text from a server, made safe to write to a terminal (or to a file someone will `cat`).

A server chooses every status message, tool text, elicitation prompt, error message and task id
this client shows. Written raw, those strings can drive the terminal that shows them: an OSC
sequence retitles the window, `ESC[2J` clears the screen, a C1 CSI (U+009B) does the same on
terminals that honour 8-bit controls, a carriage return or a line separator overwrites a line, and
a bidi override or a zero-width character makes text read differently from what it is — enough to
fake a password prompt where the user types. So every path that writes server text goes through
this module, which shows those characters as escapes instead:

- `terminal_text` for prose: C0 controls (except a tab, and a newline where the caller allows one),
  DEL, C1 controls, format characters (bidi embeddings, overrides and isolates, zero-width
  characters, the BOM), line and paragraph separators and lone surrogates become `\\x1b`,
  `\\u202e`, `\\U000e0001`;
- `terminal_json` for JSON: `json.dumps` keeps printable non-ASCII text as it is
  (`ensure_ascii=False`, so names read as written) but escapes the same characters as JSON
  `\\uXXXX` escapes, so the output is still the same JSON value.

Printable text is left alone, backslashes included: an escape a server wrote itself reads the same
as one made here, which is harmless; what matters is that nothing reaches the terminal as a control.
"""

from __future__ import annotations

import json
import re
import unicodedata
from typing import Any

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
"""Controls, format characters (bidi, zero-width), surrogates and the two Unicode line breaks."""

_CANDIDATES = re.compile(r"[^\t\n\x20-\x7e]")
"""Anything but printable ASCII, tab and newline: the characters worth a category look-up."""


def unsafe(character: str) -> bool:
    """Whether one character must not reach a terminal as it is."""
    return unicodedata.category(character) in _UNSAFE_CATEGORIES


def _text_escape(character: str) -> str:
    point = ord(character)
    if point < 0x100:
        return f"\\x{point:02x}"
    if point < 0x10000:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def _json_escape(character: str) -> str:
    point = ord(character)
    if point < 0x10000:
        return f"\\u{point:04x}"
    # JSON has no 32-bit escape: a surrogate pair, as `json.dumps(ensure_ascii=True)` writes it.
    high, low = divmod(point - 0x10000, 0x400)
    return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"


def terminal_text(text: object, *, newlines: bool = False) -> str:
    """`text` (any object, as `str()` shows it) with every unsafe character escaped.

    `newlines=True` keeps `\\n` for text that is meant to span lines (a prompt's message); by default
    it is escaped too, so a one-line status cannot forge the next line of output.
    """
    value = str(text)

    def escape(match: re.Match[str]) -> str:
        character = match.group()
        return _text_escape(character) if unsafe(character) else character

    safe = _CANDIDATES.sub(escape, value)
    return safe if newlines else safe.replace("\n", "\\n")


def terminal_json(value: Any, *, indent: int | None = 2) -> str:
    """`value` as JSON for stdout: printable text as written, unsafe characters as `\\uXXXX`."""
    dumped = json.dumps(value, indent=indent, ensure_ascii=False)
    # json.dumps already escapes C0 controls; DEL, C1, format characters, separators and lone
    # surrogates it leaves raw (inside strings, the only place non-ASCII can be in JSON).

    def escape(match: re.Match[str]) -> str:
        character = match.group()
        return _json_escape(character) if unsafe(character) else character

    return _CANDIDATES.sub(escape, dumped)
