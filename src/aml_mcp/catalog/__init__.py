"""What a server offers: tools, prompts and resources, each in one registry.

A `Catalog` is handed to the composition root; the AML server and the conformance fixture
server differ only in the catalog they serve.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from aml_mcp.catalog.prompts import PromptRegistry
from aml_mcp.catalog.resources import ResourceRegistry
from aml_mcp.catalog.tools import ToolRegistry


@dataclass(slots=True)
class Catalog:
    tools: ToolRegistry = field(default_factory=ToolRegistry)
    prompts: PromptRegistry | None = None
    resources: ResourceRegistry | None = None
    completions: bool = False
    """Whether completion/complete is served (answered from prompt argument hints)."""
    scope_hierarchy: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Which of the catalog's scopes imply others (a broad scope granting narrower ones): the
    default of `auth.scope_hierarchy`, so the resource server never hard-codes a domain's scopes."""


__all__ = ["Catalog", "PromptRegistry", "ResourceRegistry", "ToolRegistry"]
