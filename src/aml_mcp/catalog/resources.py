"""The resource registry: fixed resources and URI templates, each with its reader."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.shared.uri_template import UriTemplate

from aml_mcp.listeners import Listeners

Contents = list[types.TextResourceContents | types.BlobResourceContents]
ResourceReader = Callable[[str, dict[str, Any]], Awaitable[Contents]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceSpec:
    uri: str
    name: str
    read: ResourceReader
    description: str | None = None
    mime_type: str | None = None

    @property
    def wire(self) -> types.Resource:
        return types.Resource(
            uri=self.uri, name=self.name, description=self.description, mime_type=self.mime_type
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceTemplateSpec:
    uri_template: str
    name: str
    read: ResourceReader
    description: str | None = None
    mime_type: str | None = None
    _parsed: UriTemplate = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_parsed", UriTemplate.parse(self.uri_template))

    def match(self, uri: str) -> dict[str, Any] | None:
        return self._parsed.match(uri)

    @property
    def wire(self) -> types.ResourceTemplate:
        return types.ResourceTemplate(
            uri_template=self.uri_template,
            name=self.name,
            description=self.description,
            mime_type=self.mime_type,
        )


class ResourceRegistry:
    """Fixed resources and URI templates, with change notification for list-changed streams."""

    def __init__(
        self, resources: Iterable[ResourceSpec] = (), templates: Iterable[ResourceTemplateSpec] = ()
    ) -> None:
        self._resources = {resource.uri: resource for resource in resources}
        self._templates = list(templates)
        self.changes: Listeners[[]] = Listeners()

    def resources(self) -> list[ResourceSpec]:
        return list(self._resources.values())

    def templates(self) -> list[ResourceTemplateSpec]:
        return list(self._templates)

    async def knows(self, uri: str) -> bool:
        """Whether a resource or template here answers to `uri` (for listen's resource filter)."""
        return uri in self._resources or any(t.match(uri) is not None for t in self._templates)

    async def read(self, uri: str) -> Contents | None:
        """The contents at `uri`, or `None` when nothing here answers to it."""
        resource = self._resources.get(uri)
        if resource is not None:
            return await resource.read(uri, {})
        for template in self._templates:
            variables = template.match(uri)
            if variables is not None:
                return await template.read(uri, variables)
        return None
