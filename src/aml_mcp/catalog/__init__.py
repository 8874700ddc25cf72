"""What a server offers: tools, prompts and resources, each in one registry.

A `Catalog` is handed to the composition root; the AML server and the conformance fixture
server differ only in the catalog they serve.
"""

from __future__ import annotations

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


__all__ = ["Catalog", "PromptRegistry", "ResourceRegistry", "ToolRegistry"]
