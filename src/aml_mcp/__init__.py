"""aml-mcp: an MCP 2026-07-28 server for anti-money-laundering analysts.

The names exported here (and from `aml_mcp.catalog`, for tool authors) are the public API for
people who embed the server or add tools: `build_app(load_settings(), catalog=...)` is a complete
ASGI application. The AML domain's seam for a bank's own SAR writer is `aml_mcp.aml.Drafter`.
Every other module is internal and may change between releases.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from aml_mcp._version import __version__

if TYPE_CHECKING:
    from aml_mcp.app import build_app
    from aml_mcp.catalog import (
        Catalog,
        Execution,
        InputRequest,
        InvocationContext,
        PromptRegistry,
        PromptSpec,
        ResourceRegistry,
        ResourceSpec,
        ResourceTemplateSpec,
        ToolRegistry,
        ToolSpec,
        arguments_schema,
        elicit_form,
        request_input,
        tool_error,
    )
    from aml_mcp.component import Component
    from aml_mcp.config import Settings, load_settings
    from aml_mcp.principal import Principal

__all__ = [
    "Catalog",
    "Component",
    "Execution",
    "InputRequest",
    "InvocationContext",
    "Principal",
    "PromptRegistry",
    "PromptSpec",
    "ResourceRegistry",
    "ResourceSpec",
    "ResourceTemplateSpec",
    "Settings",
    "ToolRegistry",
    "ToolSpec",
    "__version__",
    "arguments_schema",
    "build_app",
    "elicit_form",
    "load_settings",
    "request_input",
    "tool_error",
]

_HOMES = {
    "build_app": "aml_mcp.app",
    "Component": "aml_mcp.component",
    "Settings": "aml_mcp.config",
    "load_settings": "aml_mcp.config",
    "Principal": "aml_mcp.principal",
}
"""Where each exported name lives (the rest are the catalog's)."""


def __getattr__(name: str) -> object:
    """The server's API, imported on first use (PEP 562): `import aml_mcp.client` and the `aml-mcp`
    command start by importing this package, and neither may pay for the server (or need its
    `server` extra installed) when it only speaks to one."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES.get(name, "aml_mcp.catalog")), name)
    globals()[name] = value  # later lookups find it without coming back here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
