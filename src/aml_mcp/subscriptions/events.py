"""What can happen on the server that a listen stream may want to hear about.

Events carry their audience: a task event names its owner and the scope needed to see it, so a
stream can check, per event, that it is allowed to deliver it. Events are plain data so a
cross-process bus (PostgreSQL LISTEN/NOTIFY) can carry them as JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aml_mcp.principal import Owner


@dataclass(frozen=True, slots=True)
class ListChanged:
    """The tool, prompt or resource list changed."""

    kind: Literal["tools", "prompts", "resources"]


@dataclass(frozen=True, slots=True)
class ResourceUpdated:
    uri: str


@dataclass(frozen=True, slots=True)
class TaskChanged:
    """A task's status (or what its status carries) changed; `state` is what `tasks/get` would answer."""

    owner: Owner
    task_id: str
    scope: str | None
    state: Mapping[str, Any]
    version: int = 0
    """The task's version in `state`: a stream sends no version older than or equal to one it sent
    (a cross-process bus may deliver late or twice). 0 means unknown: always sent."""


@dataclass(frozen=True, slots=True)
class AccessChanged:
    """A credential was revoked or the scope policy changed: every open stream re-checks now."""


Event = ListChanged | ResourceUpdated | TaskChanged | AccessChanged
