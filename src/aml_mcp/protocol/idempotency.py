"""The idempotency key a client may put on `tools/call`, so a create retried after a lost answer
names the task the first attempt made instead of a second one.

Why in `_meta` and not in the arguments: it is about the call, not the tool's input; every tool
takes it, and a tool's schema stays the tool's. The key's name is this server's own `_meta` prefix
(`aml-mcp/`), like the required scope on `tools/list` entries.

What the key may be is decided here, once, for every tool: a string of 1 to `MAX_KEY_LENGTH`
visible ASCII characters (`!` to `~`; a UUID, a base64url token). Anything else is the caller's
mistake and refused with -32602 before the tool is looked at further, sync tool or task alike: a
key the server would silently ignore would let a client believe its retries are safe when they are
not. What a key does is the tool's execution policy's business: a task create is answered with the
task the key already names (`TaskService.create`); a sync call simply runs, since it keeps nothing
to answer twice.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from aml_mcp.protocol.errors import invalid_params

IDEMPOTENCY_KEY_META: Final = "aml-mcp/idempotencyKey"
"""`_meta` key of `tools/call` holding the caller's idempotency key."""
MAX_KEY_LENGTH: Final = 255
"""Long enough for any key a client generates (a UUID is 36), short enough to index cheaply."""

_KEY = re.compile(rf"[!-~]{{1,{MAX_KEY_LENGTH}}}")
INVALID_KEY = (
    f'_meta["{IDEMPOTENCY_KEY_META}"] must be a string of 1 to {MAX_KEY_LENGTH} visible ASCII characters'
)


def idempotency_key(meta: Mapping[str, Any] | None) -> str | None:
    """The request's idempotency key, `None` when it sent none; -32602 when the key is not one."""
    if meta is None or IDEMPOTENCY_KEY_META not in meta:
        return None
    key = meta[IDEMPOTENCY_KEY_META]
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise invalid_params(INVALID_KEY)
    return key


__all__ = ["IDEMPOTENCY_KEY_META", "MAX_KEY_LENGTH", "idempotency_key"]
