"""Which OAuth scopes a request needs: one rule per method, composed by the auth gate.

Rules live with the feature that knows the answer — the tool registry for `tools/call`, the task
store for `tasks/*` (the scope of the tool that created the task) — and the gate asks them all
before the request reaches the protocol layer, so a refusal can still be an HTTP 403.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aml_mcp.catalog.tools import ToolRegistry
from aml_mcp.principal import Principal

ScopeRule = Callable[[Mapping[str, Any], Principal], Awaitable[frozenset[str]]]
"""Given a request's params and the verified caller, the scopes it needs (empty: none)."""

NO_SCOPES: frozenset[str] = frozenset()


class ScopeRules:
    def __init__(self) -> None:
        self._rules: dict[str, ScopeRule] = {}

    def add(self, method: str, rule: ScopeRule) -> None:
        if method in self._rules:
            raise ValueError(f"a scope rule for {method} is already registered")
        self._rules[method] = rule

    async def needed(self, method: str, params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        rule = self._rules.get(method)
        return await rule(params, principal) if rule is not None else NO_SCOPES


def tool_scope(tools: ToolRegistry, params: Mapping[str, Any]) -> frozenset[str]:
    """The scope a `tools/call` with these params needs; an unknown tool needs none (it fails as unknown)."""
    name = params.get("name")
    tool = tools.get(name) if isinstance(name, str) else None
    return frozenset({tool.scope}) if tool is not None and tool.scope else NO_SCOPES


def tool_scope_rule(tools: ToolRegistry) -> ScopeRule:
    async def rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        return tool_scope(tools, params)

    return rule
