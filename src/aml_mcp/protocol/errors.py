"""JSON-RPC errors this server raises, built in one place so their shapes never drift."""

from __future__ import annotations

from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from aml_mcp.catalog.invocation import missing_capability
from aml_mcp.protocol.capabilities import TASKS_EXTENSION


def missing_tasks_extension() -> MCPError:
    return missing_capability({"extensions": {TASKS_EXTENSION: {}}}, TASKS_EXTENSION)


def invalid_params(message: str, data: Any = None) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message, data=data)
