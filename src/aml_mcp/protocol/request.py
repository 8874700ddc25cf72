"""Who is asking: the verified caller of the request a handler is serving."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR

from aml_mcp.principal import Principal, principal_in


def request_principal(ctx: ServerRequestContext[Any, Any]) -> Principal:
    """The verified caller of this request, as the HTTP layer attached it."""
    request = ctx.request
    if request is None:
        raise MCPError(code=INTERNAL_ERROR, message="Internal error")
    return principal_in(request.scope)
