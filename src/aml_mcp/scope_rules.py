"""Which OAuth scopes a request needs: one rule per method, composed by the auth gate.

Rules live with the feature that knows the answer — the tool registry for `tools/call`, the task
handlers for `tasks/*` (the scope of the tool that created the task), the listen handler for
`subscriptions/listen` — and each component hands its rules to the composition root, which builds
one complete `ScopeRules` before the gate exists. The gate asks it before the request reaches the
protocol layer, so a refusal can still be an HTTP 403.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from aml_mcp.principal import Principal

ScopeRule = Callable[[Mapping[str, Any], Principal], Awaitable[frozenset[str]]]
"""Given a request's params and the verified caller, the scopes it needs (empty: none)."""

NO_SCOPES: frozenset[str] = frozenset()


class StaticScopeRule:
    """A rule that needs only the params: it can also say, before any token is verified, which
    scope a call will need (the `scope` of a 401 challenge, so a client asks for it up front)."""

    def __init__(self, scopes_of: Callable[[Mapping[str, Any]], frozenset[str]]) -> None:
        self.scopes_of = scopes_of

    async def __call__(self, params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        return self.scopes_of(params)


class ScopeRules:
    """Every method's rule, fixed at construction: a method without one needs no scope."""

    def __init__(self, *groups: Mapping[str, ScopeRule]) -> None:
        self._rules: dict[str, ScopeRule] = {}
        for group in groups:
            for method, rule in group.items():
                if method in self._rules:
                    raise ValueError(f"a scope rule for {method} is already registered")
                self._rules[method] = rule

    @property
    def methods(self) -> Iterable[str]:
        """The methods that have a rule (for documentation and tests)."""
        return tuple(self._rules)

    async def needed(self, method: str, params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
        rule = self._rules.get(method)
        return await rule(params, principal) if rule is not None else NO_SCOPES

    def hint(self, method: str, params: Mapping[str, Any]) -> frozenset[str]:
        """The scopes a request will need as far as its params alone tell (static rules only)."""
        rule = self._rules.get(method)
        return rule.scopes_of(params) if isinstance(rule, StaticScopeRule) else NO_SCOPES
