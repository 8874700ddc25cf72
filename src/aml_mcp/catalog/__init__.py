"""What a server offers: tools, prompts and resources, each in one registry — and the API tool authors use.

A `Catalog` is handed to the composition root (`build_app(settings, catalog=...)`); the AML server
and the conformance fixture server differ only in the catalog they serve. Everything a tool,
prompt or resource author needs is exported here; other modules of the package are internal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aml_mcp.catalog.arguments import arguments_schema
from aml_mcp.catalog.invocation import (
    InputRequest,
    InvocationContext,
    client_supports,
    elicit_form,
    list_roots,
    missing_capability,
    request_input,
    sample,
)
from aml_mcp.catalog.prompts import PromptRegistry, PromptSpec
from aml_mcp.catalog.resources import Contents, ResourceRegistry, ResourceSpec, ResourceTemplateSpec
from aml_mcp.catalog.tools import Execution, ToolBody, ToolOutcome, ToolRegistry, ToolSpec, tool_error


@dataclass(slots=True)
class Catalog:
    """Everything a server offers; hand one to `build_app(settings, catalog=...)`."""

    tools: ToolRegistry = field(default_factory=ToolRegistry)
    prompts: PromptRegistry | None = None
    resources: ResourceRegistry | None = None
    completions: bool = False
    """Whether completion/complete is served (answered from prompt argument hints)."""
    scope_hierarchy: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Which of the catalog's scopes imply others (a broad scope granting narrower ones): the
    default of `auth.scope_hierarchy`, so the resource server never hard-codes a domain's scopes."""


__all__ = [
    "Catalog",
    "Contents",
    "Execution",
    "InputRequest",
    "InvocationContext",
    "PromptRegistry",
    "PromptSpec",
    "ResourceRegistry",
    "ResourceSpec",
    "ResourceTemplateSpec",
    "ToolBody",
    "ToolOutcome",
    "ToolRegistry",
    "ToolSpec",
    "arguments_schema",
    "client_supports",
    "elicit_form",
    "list_roots",
    "missing_capability",
    "request_input",
    "sample",
    "tool_error",
]
