"""Stored evaluation baselines, per tenant: the `Baselines` protocol, the `Baseline` record and the
refusal both backends share (`sqlite.py` in the data directory's database, `postgres.py` in the
database replicas share; component `aml_eval` on both).

Why a history rather than one row per tenant: a baseline is what later runs are measured
against, and knowing which run set it (and when) matters when a figure moves.

Why saving is a no-op for an identical result: `run_full_eval` is re-run from the start after a
crash (it is declared idempotent), and a crash can fall between saving the baseline and
recording the task's result. Saving a result whose *digest* (dataset fingerprint + figures)
equals the newest baseline's adds no row and returns that baseline, so a re-run changes nothing
more. (Its report then compares with the baseline the first attempt saved: deltas of zero.)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.principal import Principal
from aml_mcp.store.text import storable


@dataclass(frozen=True, slots=True)
class Baseline:
    baseline_id: str
    saved_at_ms: int
    saved_by: str
    """The subject who saved it (within the same tenant; never another tenant's)."""
    digest: str
    figures: dict[str, Any]


class Baselines(Protocol):
    """What the evaluation needs: a tenant's newest baseline, and saving a new one."""

    async def latest(self, tenant: str) -> Baseline | None:
        """The newest baseline of `tenant` (what a run compares with), if any."""
        ...

    async def save(self, principal: Principal, digest: str, figures: dict[str, Any]) -> Baseline:
        """Make `figures` the tenant's newest baseline; a no-op returning it if it already is."""
        ...


class UnstorableBaseline(ValueError):
    """A baseline no store keeps as written, refused before anything is sent (on both backends):
    a tenant or digest holding U+0000 or an unpaired surrogate, or who saved it holding an
    unpaired surrogate."""


def refuse_unstorable(principal: Principal, digest: str) -> None:
    """Raise `UnstorableBaseline` unless both stores keep this save as written: the tenant and
    digest are `TEXT` on PostgreSQL (no U+0000), who saved it is bytes there; no driver sends an
    unpaired surrogate. Checked before anything is sent, so the two stores answer alike."""
    if not storable(principal.tenant) or not storable(digest):
        raise UnstorableBaseline(
            "a tenant or digest holding U+0000 or an unpaired surrogate cannot have baselines"
        )
    try:
        for value in (principal.issuer, principal.subject, principal.client_id):
            value.encode("utf-8")
    except UnicodeEncodeError:
        raise UnstorableBaseline("a principal holding an unpaired surrogate cannot save a baseline") from None


COLUMNS = "baseline_id, saved_at_ms, subject, digest, figures"
"""What a store reads of a baseline row, in the order of `Baseline`'s fields."""


def figures_text(figures: dict[str, Any]) -> str:
    """The figures as both stores keep them: compact JSON with sorted keys."""
    return json.dumps(figures, sort_keys=True, separators=(",", ":"))
