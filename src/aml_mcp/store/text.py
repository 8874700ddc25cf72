"""Which text every store keeps exactly as written, whichever database holds it.

Backend-neutral on purpose: the store protocols refuse (or answer "nothing found" for) a value no
backend can keep before any backend sees it, so both answer alike, and they check it without
importing a database driver.
"""

from __future__ import annotations


def unicode_text(value: str) -> bool:
    """Whether `value` is valid Unicode (no unpaired surrogate), which both drivers can encode."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(value: str) -> bool:
    """Whether PostgreSQL `TEXT` can hold `value` as written (no U+0000, no unpaired surrogate):
    the stores check before they send, so such a value is a clear refusal or a miss, never a
    database error in the middle of a transaction."""
    return "\x00" not in value and unicode_text(value)


__all__ = ["storable", "unicode_text"]
