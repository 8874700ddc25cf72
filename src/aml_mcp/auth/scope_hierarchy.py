"""Scope hierarchy: a broad scope implies narrower ones (`aml:admin` ⇒ `aml:read aml:eval aml:draft`).

The MCP authorization spec requires servers to honour such hierarchies when deciding whether a
token suffices. Implications are expanded once, at start-up, into a closure; a check is then a
set operation on the request path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class ScopeHierarchy:
    def __init__(self, implies: Mapping[str, Iterable[str]]) -> None:
        graph = {scope: set(children) for scope, children in implies.items()}
        self._closure: dict[str, frozenset[str]] = {}
        for scope in graph:
            seen: set[str] = set()
            stack = [scope]
            while stack:
                current = stack.pop()
                if current in seen:
                    continue
                seen.add(current)
                stack.extend(graph.get(current, ()))
            self._closure[scope] = frozenset(seen)

    @property
    def scopes(self) -> frozenset[str]:
        """Every scope the hierarchy names, as an implying or an implied one."""
        return frozenset().union(*self._closure.values()) if self._closure else frozenset()

    def effective(self, granted: Iterable[str]) -> frozenset[str]:
        """Every scope `granted` amounts to, implied ones included."""
        result: set[str] = set()
        for scope in granted:
            result |= self._closure.get(scope, frozenset((scope,)))
        return frozenset(result)

    def missing(self, granted: frozenset[str], needed: frozenset[str]) -> frozenset[str]:
        """The needed scopes `granted` does not cover (empty: allowed)."""
        if needed <= granted:
            return frozenset()
        return needed - self.effective(granted)
