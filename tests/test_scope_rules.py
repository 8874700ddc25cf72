"""The scope rules are complete before the gate is built, one rule per method, and only a rule that
needs no caller can hint at a scope before a token is verified."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from aml_mcp.principal import LOCAL_PRINCIPAL, Principal
from aml_mcp.scope_rules import ScopeRules, StaticScopeRule


async def _owned(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
    return frozenset({f"scope-of-{principal.subject}"})


def test_rules_from_every_component_are_joined_and_a_method_is_claimed_once() -> None:
    rules = ScopeRules(
        {"tools/call": StaticScopeRule(lambda params: frozenset({"a"}))}, {"tasks/get": _owned}
    )
    assert set(rules.methods) == {"tools/call", "tasks/get"}
    with pytest.raises(ValueError, match="tasks/get"):
        ScopeRules({"tasks/get": _owned}, {"tasks/get": _owned})


def test_needed_asks_the_method_rule_and_unknown_methods_need_nothing() -> None:
    rules = ScopeRules(
        {"tools/call": StaticScopeRule(lambda params: frozenset({params["name"]}))}, {"tasks/get": _owned}
    )

    async def main() -> None:
        assert await rules.needed("tools/call", {"name": "x"}, LOCAL_PRINCIPAL) == {"x"}
        assert await rules.needed("tasks/get", {}, LOCAL_PRINCIPAL) == {f"scope-of-{LOCAL_PRINCIPAL.subject}"}
        assert await rules.needed("ping", {}, LOCAL_PRINCIPAL) == frozenset()

    anyio.run(main)


def test_only_static_rules_give_a_hint_before_verification() -> None:
    rules = ScopeRules(
        {"tools/call": StaticScopeRule(lambda params: frozenset({"a"}))}, {"tasks/get": _owned}
    )
    assert rules.hint("tools/call", {}) == {"a"}
    assert rules.hint("tasks/get", {"taskId": "t"}) == frozenset()
    assert rules.hint("ping", {}) == frozenset()
