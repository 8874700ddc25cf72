"""W3C trace context for requests: a `traceparent` in `_meta` ties the client's call to the server's
records of it (the audit trail keeps the trace id)."""

from __future__ import annotations

import re
import secrets

TRACEPARENT_META_KEY = "traceparent"
"""The `_meta` key MCP uses for W3C trace context."""

_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def new_traceparent() -> str:
    """A sampled `traceparent` with a fresh trace id and span id."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def trace_id(traceparent: str) -> str:
    """The 32-hex trace id of a valid `traceparent`; `ValueError` otherwise."""
    match = _TRACEPARENT.match(traceparent)
    if match is None or set(match.group(1)) == {"0"}:
        raise ValueError(f"not a W3C traceparent: {traceparent!r}")
    return match.group(1)
