"""A component's schema, as both databases apply it: an append-only list of SQL scripts.

Backend-neutral on purpose: stores of either backend, and components that only describe their
tables, import it without importing a database module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple


class Migration(NamedTuple):
    """One component's schema: an append-only list of SQL scripts (add a step, never edit one).

    Every database applies it the same way: step N runs once, in a transaction of its own, and is
    recorded under `component` in `schema_migrations`; components never share a numbering.
    """

    component: str
    steps: Sequence[str]


__all__ = ["Migration"]
