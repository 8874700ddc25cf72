"""Drafting and checking one tenant's cases, in time-bounded slices for worker threads.

Why slices: the store and the drafter are synchronous and a whole dataset takes seconds to
minutes, yet a task must stop within a second of a cancel. The async caller hands a slice to a
worker thread, which drafts cases until its time budget is spent (always at least one), then
looks up every candidate identifier of the slice's drafts in one query and runs the checks. The
caller reports progress and passes a cancellation point between slices.

Both long tools use this: `run_full_eval` over every case id of the tenant, `draft_sar_batch`
over the cases the caller named.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import anyio.lowlevel
import anyio.to_thread

from aml_mcp.aml.notes.model import InvalidTenantError
from aml_mcp.aml.notes.storage import ForeignIdentifiers, NotesBackend
from aml_mcp.aml.sar.checks import CheckResult, CheckSuite, foreign_candidates
from aml_mcp.aml.sar.draft import Drafter, SarDraft
from aml_mcp.aml.sar.facts import CaseFile, build_case_file
from aml_mcp.aml.sar.questions import AnalystFacts

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class CheckedDraft:
    case: CaseFile
    draft: SarDraft
    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]


class CaseWork:
    """Loads, drafts and checks cases of the tenant it is asked about (synchronous; call from threads)."""

    def __init__(
        self, store: NotesBackend, drafter: Drafter, checks: CheckSuite, directory: ForeignIdentifiers
    ) -> None:
        self._store = store
        self._drafter = drafter
        self._checks = checks
        self._directory = directory

    def case_ids(self, tenant: str) -> list[str]:
        """The tenant's case ids (none for a tenant name the store could never hold)."""
        try:
            return self._store.tenant(tenant).case_ids()
        except InvalidTenantError:
            return []

    def load(self, tenant: str, case_id: str) -> CaseFile | None:
        """The case's facts, or None when the tenant has no such case (unknown and foreign alike)."""
        try:
            notes = self._store.tenant(tenant).case_notes(case_id)
        except InvalidTenantError:
            return None
        return build_case_file(case_id, notes) if notes else None

    def draft_slice(
        self,
        tenant: str,
        jobs: Sequence[T],
        prepare: Callable[[T], tuple[CaseFile, AnalystFacts] | None],
        deadline: float,
    ) -> tuple[int, list[tuple[T, CheckedDraft | None]]]:
        """Draft and check `jobs` from the first until `deadline` (monotonic); (consumed, outcomes).

        `prepare` turns a job into a case and its analyst answers, or None (nothing to draft).
        """
        prepared: list[tuple[T, CaseFile | None, AnalystFacts, SarDraft | None]] = []
        for job in jobs:
            ready = prepare(job)
            if ready is None:
                prepared.append((job, None, {}, None))
            else:
                prepared.append((job, ready[0], ready[1], self._drafter.draft(*ready)))
            if time.monotonic() >= deadline:
                break
        candidates = {id(d): foreign_candidates(d) for _, _, _, d in prepared if d is not None}
        foreign = self._directory.foreign(tenant, set().union(*candidates.values()))
        outcomes: list[tuple[T, CheckedDraft | None]] = []
        for job, case, _, draft in prepared:
            if case is None or draft is None:
                outcomes.append((job, None))
                continue
            checks = self._checks.run(draft, case, candidates[id(draft)] & foreign)
            outcomes.append((job, CheckedDraft(case, draft, checks)))
        return len(prepared), outcomes


async def in_slices(
    jobs: Sequence[T],
    run_slice: Callable[[Sequence[T], float], tuple[int, list[R]]],
    *,
    slice_s: float,
    after_slice: Callable[[int], Awaitable[None]],
) -> list[R]:
    """Run `run_slice(remaining, deadline)` in worker threads until every job is consumed.

    `after_slice(done)` runs on the event loop between slices (progress reports); cancellation is
    checked there too, so a cancel waits for at most one slice.
    """
    results: list[R] = []
    done = 0
    while done < len(jobs):
        remaining = jobs[done:]
        deadline = time.monotonic() + slice_s
        consumed, produced = await anyio.to_thread.run_sync(run_slice, remaining, deadline)
        done += max(consumed, 1)
        results.extend(produced)
        await after_slice(done)
        await anyio.lowlevel.checkpoint()
    return results
