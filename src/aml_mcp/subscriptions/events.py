"""What can happen on the server that a listen stream may want to hear about."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, slots=True)
class ListChanged:
    """The tool, prompt or resource list changed."""

    kind: Literal["tools", "prompts", "resources"]


@dataclass(frozen=True, slots=True)
class ResourceUpdated:
    uri: str


Event = ListChanged | ResourceUpdated
