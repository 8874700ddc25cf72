"""Reading what a client declared in this request's `_meta` (there is no session to remember it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp_types import CLIENT_CAPABILITIES_META_KEY

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
"""The Tasks extension's identifier, as clients declare it and `server/discover` advertises it."""

NO_CAPABILITIES = types.ClientCapabilities()


def declared(ctx: Any) -> types.ClientCapabilities:
    """The capabilities on this request; an empty set when none were sent."""
    capabilities = ctx.session.client_capabilities
    return capabilities if capabilities is not None else NO_CAPABILITIES


def declares_tasks(source: types.ClientCapabilities | Mapping[str, Any]) -> bool:
    """Whether the Tasks extension is declared: in parsed capabilities, or in a request's raw params
    (the auth gate reads those before the SDK has parsed anything)."""
    if isinstance(source, types.ClientCapabilities):
        extensions: Any = source.extensions
    else:
        meta = source.get("_meta")
        capabilities = meta.get(CLIENT_CAPABILITIES_META_KEY) if isinstance(meta, Mapping) else None
        extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions
