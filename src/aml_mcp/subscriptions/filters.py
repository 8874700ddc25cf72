"""The listen filter: parsed strictly, then narrowed to what this caller may follow."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import mcp_types as types

from aml_mcp.http.wellformed import has_lone_surrogate
from aml_mcp.principal import Principal
from aml_mcp.protocol.capabilities import declares_tasks
from aml_mcp.protocol.errors import invalid_params, missing_tasks_extension
from aml_mcp.subscriptions.events import TaskChanged

LIST_FILTERS: dict[str, str] = {
    "toolsListChanged": "tools",
    "promptsListChanged": "prompts",
    "resourcesListChanged": "resources",
}
RESOURCE_FILTER = "resourceSubscriptions"
TASK_FILTER = "taskIds"
MAX_TASK_IDS = 100
"""Each followed id costs lookups (at the gate for its scope, here for its owner, then its current
state); a filter naming more is refused on its length alone, before any of them."""
MAX_URIS = 1000
MAX_ID_LENGTH = 256
"""Task ids are short tokens the server minted; a longer string cannot be one and is never looked up."""


def lookupable(value: Any) -> TypeGuard[str]:
    """Whether `value` could be a task id worth a store lookup: a non-empty, bounded, valid Unicode
    string (a lone surrogate cannot even be bound as an SQL parameter)."""
    return isinstance(value, str) and 0 < len(value) <= MAX_ID_LENGTH and not has_lone_surrogate(value)


class TaskLookup(Protocol):
    async def followable(self, task_id: str, principal: Principal) -> frozenset[str] | None:
        """The scopes needed to follow a task the caller owns (and that has not expired); `None` otherwise.

        Same owner rule as `tasks/get`: looked up by id and owner together, so a foreign id and an
        unknown one are the same `None`.
        """
        ...

    async def snapshot(self, task_id: str, principal: Principal) -> TaskChanged | None:
        """What `tasks/get` would answer now (with the task's version), or `None`."""
        ...

    async def scopes_to_follow(self, task_id: str, principal: Principal) -> frozenset[str]:
        """The scopes following a task needs, for the gate: none for an id the caller does not own."""
        ...


@dataclass(frozen=True, slots=True)
class Accepted:
    """What a stream delivers: the acknowledged filter and the scopes each part needs."""

    lists: frozenset[str] = frozenset()
    uris: frozenset[str] = frozenset()
    tasks: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def needed(self) -> frozenset[str]:
        return frozenset().union(*self.tasks.values()) if self.tasks else frozenset()


def _bool(requested: Mapping[str, Any], key: str) -> bool:
    value = requested.get(key)
    if value is not None and not isinstance(value, bool):
        raise invalid_params(f"{key} must be a boolean")
    return bool(value)


def _strings(requested: Mapping[str, Any], key: str, limit: int) -> list[str] | None:
    value = requested.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > limit:
        raise invalid_params(f"{key} must be a list of at most {limit} non-empty strings")
    if not all(isinstance(item, str) and item for item in value):
        raise invalid_params(f"{key} must be a list of non-empty strings")
    return list(dict.fromkeys(value))


async def accept(
    requested: Any,
    *,
    principal: Principal,
    capabilities: types.ClientCapabilities,
    served: frozenset[str],
    resource_exists: Callable[[str], Awaitable[bool]] | None,
    tasks: TaskLookup | None,
) -> tuple[Accepted, dict[str, Any]]:
    """Validate the filter and keep only what this caller may follow; returns it and its acknowledgement.

    Malformed filters and unknown keys are errors (-32602). A task filter needs the Tasks extension
    declared on this very request (-32021). Task ids the caller does not own are dropped without a
    tell, exactly as ids that never existed.
    """
    if not isinstance(requested, dict):
        raise invalid_params("notifications must be an object")
    known = {*LIST_FILTERS, RESOURCE_FILTER, TASK_FILTER}
    unknown = sorted(key for key in requested if key not in known)
    if unknown:
        raise invalid_params(f"Unknown subscription filter: {', '.join(unknown)}")
    lists = frozenset(kind for key, kind in LIST_FILTERS.items() if _bool(requested, key) and kind in served)
    uri_order = _strings(requested, RESOURCE_FILTER, limit=MAX_URIS) or []
    task_order = _strings(requested, TASK_FILTER, limit=MAX_TASK_IDS)
    if task_order is not None and not declares_tasks(capabilities):
        raise missing_tasks_extension()

    uris: set[str] = set()
    if uri_order and "resources" in served and resource_exists is not None:
        uris = {uri for uri in uri_order if await resource_exists(uri)}
    followed: dict[str, frozenset[str]] = {}
    if task_order and tasks is not None:
        for task_id in task_order:
            if not lookupable(task_id):
                continue  # never a task anybody owns: dropped like an unknown id
            scopes = await tasks.followable(task_id, principal)
            if scopes is not None:
                followed[task_id] = scopes

    acknowledged: dict[str, Any] = {key: True for key, kind in LIST_FILTERS.items() if kind in lists}
    if uris:
        acknowledged[RESOURCE_FILTER] = [uri for uri in uri_order if uri in uris]
    if task_order is not None:
        acknowledged[TASK_FILTER] = [task_id for task_id in task_order if task_id in followed]
    return Accepted(lists=lists, uris=frozenset(uris), tasks=followed), acknowledged
