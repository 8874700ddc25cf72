"""Reading what a client declared in this request's `_meta` (there is no session to remember it)."""

from __future__ import annotations

from typing import Any

import mcp_types as types

from aml_mcp.protocol.errors import TASKS_EXTENSION

NO_CAPABILITIES = types.ClientCapabilities()


def declared(ctx: Any) -> types.ClientCapabilities:
    """The capabilities on this request; an empty set when none were sent."""
    capabilities = ctx.session.client_capabilities
    return capabilities if capabilities is not None else NO_CAPABILITIES


def declares_tasks(capabilities: types.ClientCapabilities) -> bool:
    extensions = capabilities.extensions
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions
