"""Scope rules for `tasks/*`: a task can be read, answered or cancelled only with the scope of the
tool that created it, checked with the token of *this* request.

The rule looks the task up by id and owner (one query, like every task lookup); an unknown,
foreign or expired id needs no scope, so it goes on to fail as unknown — the gate never reveals
that somebody else's task exists. A request that did not declare the extension needs no scope
either: it is refused with -32021 before any lookup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aml_mcp.principal import Principal
from aml_mcp.protocol.errors import TASKS_EXTENSION
from aml_mcp.scope_rules import NO_SCOPES, ScopeRule, ScopeRules
from aml_mcp.subscriptions.filters import MAX_TASK_IDS
from aml_mcp.tasks.service import TaskService

TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"


def _declares_tasks(params: Mapping[str, Any]) -> bool:
    meta = params.get("_meta")
    capabilities = meta.get(CLIENT_CAPABILITIES_KEY) if isinstance(meta, Mapping) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, Mapping) else None
    return isinstance(extensions, Mapping) and TASKS_EXTENSION in extensions


def task_scope_rule(service: TaskService) -> ScopeRule:
    async def rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        task_id = params.get("taskId")
        if not _declares_tasks(params) or not isinstance(task_id, str) or not task_id:
            return NO_SCOPES
        scope = await service.scope_of(task_id, principal.owner)
        return frozenset({scope}) if scope else NO_SCOPES

    return rule


def listen_scope_rule(service: TaskService) -> ScopeRule:
    """Following tasks on a listen stream needs, as `tasks/get` does, the scope of each owned task's tool."""

    async def rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        notifications = params.get("notifications")
        task_ids = notifications.get("taskIds") if isinstance(notifications, Mapping) else None
        if not _declares_tasks(params) or not isinstance(task_ids, list) or len(task_ids) > MAX_TASK_IDS:
            return NO_SCOPES
        needed: set[str] = set()
        for task_id in dict.fromkeys(task_ids):
            if isinstance(task_id, str) and task_id:
                scope = await service.scope_of(task_id, principal.owner)
                if scope:
                    needed.add(scope)
        return frozenset(needed)

    return rule


def add_task_scope_rules(rules: ScopeRules, service: TaskService) -> None:
    rule = task_scope_rule(service)
    for method in TASK_METHODS:
        rules.add(method, rule)
    rules.add("subscriptions/listen", listen_scope_rule(service))
