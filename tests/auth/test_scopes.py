"""The scope hierarchy: which scopes a granted set implies, and which a call still lacks."""

from __future__ import annotations

from aml_mcp.auth.scope_hierarchy import ScopeHierarchy


def test_scope_hierarchy_is_transitive_and_survives_cycles() -> None:
    hierarchy = ScopeHierarchy({"admin": ["lead"], "lead": ["read", "draft"], "read": ["admin"]})
    assert hierarchy.effective({"admin"}) == {"admin", "lead", "read", "draft"}
    assert not hierarchy.missing(frozenset({"lead"}), frozenset({"draft"}))
    assert hierarchy.missing(frozenset({"draft"}), frozenset({"read", "draft"})) == {"read"}
