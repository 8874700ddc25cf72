"""The labelled query set for a tenant, when there is one: only a demo bank holding the demo notes.

Why regenerate instead of storing: the demo corpus and its queries are a pure function of
(bank, notes per bank, seed), so the labels are rebuilt from the tenant's note count and the
configured seed, then trusted only if the rebuilt notes fingerprint-match the stored ones. A bank
that has ingested its own notes (or changed the demo's) gets no retrieval figures, with the reason,
rather than figures graded against labels that no longer describe its data.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from aml_mcp.aml.demo.corpus import (
    MAX_NOTES_PER_TENANT,
    TENANTS,
    LabelledQuery,
    exact_queries,
    generate_notes,
    keyword_queries,
    paraphrase_queries,
)
from aml_mcp.aml.evaluation.fingerprint import fingerprint

EXACT_PER_KIND = 20
"""Exact-identifier queries per kind, as in the benchmark's labelled set."""

NOT_A_DEMO_TENANT = "no labelled query set: labels exist only for the demo corpus's banks"
NOT_THE_DEMO_DATA = "no labelled query set: this tenant's notes are not the demo corpus's"


@dataclass(frozen=True, slots=True)
class LabelSet:
    queries: list[LabelledQuery]
    reason: str | None = None
    """Why there are no queries (None when there are)."""


@dataclass
class DemoLabels:
    """Builds (and remembers, per tenant and fingerprint) the demo labels for a tenant."""

    seed: int
    _cache: dict[tuple[str, str], LabelSet] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def for_tenant(self, tenant: str, notes: int, dataset_fingerprint: str) -> LabelSet:
        """Labels for `tenant` if its `notes` notes fingerprint as the demo's (slow: call from a thread)."""
        spec = next((t for t in TENANTS if t.name == tenant), None)
        if spec is None:
            return LabelSet([], NOT_A_DEMO_TENANT)
        if not 1 <= notes <= MAX_NOTES_PER_TENANT:
            return LabelSet([], NOT_THE_DEMO_DATA)
        key = (tenant, dataset_fingerprint)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        demo = generate_notes(spec, notes, self.seed)
        if fingerprint(d.note for d in demo) != dataset_fingerprint:
            labels = LabelSet([], NOT_THE_DEMO_DATA)
        else:
            labels = LabelSet(
                paraphrase_queries(tenant, demo)
                + keyword_queries(tenant, demo, self.seed)
                + exact_queries(tenant, demo, EXACT_PER_KIND, self.seed)
            )
        with self._lock:
            if len(self._cache) >= len(TENANTS) * 2:
                self._cache.clear()
            self._cache[key] = labels
        return labels
