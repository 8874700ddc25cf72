"""The AML tools' OAuth scopes and how they nest: the domain's vocabulary, stated once.

The generic resource server knows no scope names; the catalog hands it this hierarchy as the
default of `auth.scope_hierarchy`, the same way the tools hand it `scopes_supported`.
"""

from __future__ import annotations

READ = "aml:read"
"""Search case notes."""
EVAL = "aml:eval"
"""Run the full evaluation (and save baselines)."""
DRAFT = "aml:draft"
"""Draft SARs."""
ADMIN = "aml:admin"
"""Everything above."""

SCOPE_HIERARCHY: dict[str, list[str]] = {ADMIN: [READ, EVAL, DRAFT]}
