"""The W3C trace id a request carries (`_meta.traceparent`), for the audit record of that request:
one id joins the client's trace, the server's logs and the trail.

The value comes from the caller, so only a well-formed `traceparent` (version 00, 32 lower-case
hex digits of trace id, not all zero) yields an id; anything else records none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

TRACEPARENT_META_KEY = "traceparent"
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}")


def trace_id_of(params: Mapping[str, Any] | None) -> str | None:
    """The trace id of `params._meta.traceparent`, or `None` when absent or malformed."""
    meta = params.get("_meta") if isinstance(params, Mapping) else None
    value = meta.get(TRACEPARENT_META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(value, str):
        return None
    match = _TRACEPARENT.fullmatch(value)
    if match is None or set(match.group(1)) == {"0"}:
        return None
    return match.group(1)
