"""aml-mcp: an MCP 2026-07-28 server for anti-money-laundering analysts.

The names exported here (and from `aml_mcp.catalog`, for tool authors) are the public API for
people who embed the server or add tools: `build_app(load_settings(), catalog=...)` is a complete
ASGI application. The AML domain's seam for a bank's own SAR writer is `aml_mcp.aml.Drafter`.
Every other module is internal and may change between releases.
"""

from aml_mcp._version import __version__
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
