"""`run_full_eval`'s work: draft and check every case of a tenant, grade retrieval, compare with a baseline.

The report has three parts:

- **code checks**: every case of the tenant drafted (with no analyst answers: an evaluation
  never asks anyone) and checked (`checks.CHECKS`); the pass rate is the share of cases whose
  draft passes every check, with per-check rates and the first failing cases;
- **retrieval**: recall@10 and nDCG@10 of hybrid search on the labelled query set — which exists
  only for a demo bank holding the demo notes (`demo_labels`); otherwise the reason is given;
- **baseline**: the figures of the newest stored baseline that differs from this run, the deltas
  against it, and, if asked, this run saved as the new baseline (`baselines`).

Everything is a deterministic function of the tenant's notes and the configuration, which is what
makes the tool safe to re-run after a crash (`ToolSpec.idempotent`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anyio.to_thread

from aml_mcp.aml.demo.corpus import LabelledQuery
from aml_mcp.aml.evaluation.fingerprint import combine, note_digest
from aml_mcp.aml.evaluation.labels import DemoLabels, LabelSet
from aml_mcp.aml.evaluation.metrics import ndcg_at_k, recall_at_k
from aml_mcp.aml.evaluation.storage import Baseline, Baselines
from aml_mcp.aml.notes.storage import NotesBackend
from aml_mcp.aml.sar.batches import CaseWork, in_slices
from aml_mcp.aml.sar.checks import CHECKS
from aml_mcp.aml.sar.facts import CaseFile
from aml_mcp.aml.sar.questions import AnalystFacts
from aml_mcp.aml.search.engine import NoteSearch, SearchRequest
from aml_mcp.principal import Principal

K = 10
MAX_LISTED_FAILURES = 50
PROGRESS_STEPS = 20
"""Progress reports per phase (drafting, grading) at least, however fast the machine: a slice takes
at most this share of a phase's work, so the steps do not depend on how much fits in a time slice
(the task runner throttles what reaches the store)."""
Progress = Callable[[float, float, str], Awaitable[None]]


def step_size(total: int, steps: int = PROGRESS_STEPS) -> int:
    """The most jobs of `total` one slice takes so that a phase reports at least `steps` times."""
    return max(1, total // steps)


class NothingToEvaluate(Exception):
    """The tenant has no notes."""


@dataclass
class _Tally:
    """What the case slices accumulate (touched by one worker thread at a time)."""

    notes: int = 0
    digests: list[bytes] = field(default_factory=list)

    def load(self, case: CaseFile) -> None:
        self.notes += len(case.notes)
        self.digests.extend(note_digest(n) for n in case.notes)


@dataclass(frozen=True, slots=True)
class _Verdict:
    """What the report keeps of one case: drafts and notes are dropped as soon as they are checked,
    so a run over a large bank holds one slice of cases in memory, not all of them."""

    case_id: str
    failed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Graded:
    kind: str
    recall: float
    ndcg: float


def _rate(passed: int, total: int) -> float:
    return round(passed / total, 4) if total else 0.0


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


class Evaluator:
    def __init__(
        self,
        *,
        store: NotesBackend,
        casework: CaseWork,
        searcher: Callable[[], NoteSearch],
        labels: DemoLabels,
        baselines: Baselines,
        slice_s: float,
    ) -> None:
        self._store = store
        self._casework = casework
        self._searcher = searcher
        self._labels = labels
        self._baselines = baselines
        self._slice_s = slice_s

    async def run(
        self, principal: Principal, *, save_as_baseline: bool, progress: Progress
    ) -> dict[str, Any]:
        """The structured report for the caller's tenant (raises `NothingToEvaluate` if it is empty)."""
        tenant = principal.tenant
        case_ids = await anyio.to_thread.run_sync(self._casework.case_ids, tenant)
        if not case_ids:
            raise NothingToEvaluate
        total = len(case_ids)
        per_slice = step_size(total)
        tally = _Tally()

        def prepare(case_id: str) -> tuple[CaseFile, AnalystFacts] | None:
            case = self._casework.load(tenant, case_id)
            if case is None:
                return None
            tally.load(case)
            return case, {}

        def run_slice(jobs: Sequence[str], deadline: float) -> tuple[int, list[_Verdict | None]]:
            consumed, outcomes = self._casework.draft_slice(tenant, jobs[:per_slice], prepare, deadline)
            return consumed, [
                None if checked is None else _Verdict(case_id, tuple(checked.failed))
                for case_id, checked in outcomes
            ]

        async def drafted(done: int) -> None:
            await progress(done, total, f"drafted {done}/{total} cases")

        await progress(0, total, f"drafting {total} cases")
        outcomes = [
            c for c in await in_slices(case_ids, run_slice, slice_s=self._slice_s, after_slice=drafted) if c
        ]
        dataset = combine(tally.digests)
        code_checks = _code_checks(outcomes)

        await progress(total, total, f"checked {total} drafts; reading the labelled queries")
        labels = await anyio.to_thread.run_sync(
            self._labels.for_tenant, tenant, tally.notes, dataset, abandon_on_cancel=True
        )
        retrieval = await self._retrieval(tenant, labels, progress)

        figures = {
            "cases": len(outcomes),
            "notes": tally.notes,
            "code_check_pass_rate": code_checks["pass_rate"],
            "checks": {name: code_checks["by_check"][name]["pass_rate"] for name in CHECKS},
            "recall_at_10": retrieval["recall_at_10"],
            "ndcg_at_10": retrieval["ndcg_at_10"],
        }
        digest = hashlib.sha256(
            (dataset + json.dumps(figures, sort_keys=True, separators=(",", ":"))).encode()
        ).hexdigest()
        last = retrieval["queries"] or total  # the bar stays full where the last phase left it
        await progress(last, last, "comparing with the baseline")
        reference = await self._baselines.latest(tenant)
        saved = await self._baselines.save(principal, digest, figures) if save_as_baseline else None
        return {
            "cases": len(outcomes),
            "notes": tally.notes,
            "dataset_fingerprint": dataset,
            "code_checks": code_checks,
            "retrieval": retrieval,
            "baseline": None if reference is None else _described(reference),
            "deltas": None if reference is None else _deltas(figures, reference.figures),
            "saved_baseline": None
            if saved is None
            else {"baseline_id": saved.baseline_id, "saved_at": _iso(saved.saved_at_ms)},
        }

    async def _retrieval(self, tenant: str, labels: LabelSet, progress: Progress) -> dict[str, Any]:
        if not labels.queries:
            return {
                "available": False,
                "reason": labels.reason,
                "queries": 0,
                "recall_at_10": None,
                "ndcg_at_10": None,
                "by_kind": {},
            }
        searcher = self._searcher()
        view = self._store.tenant(tenant)
        queries = labels.queries
        total = len(queries)
        per_slice = step_size(total)

        def run_slice(jobs: Sequence[LabelledQuery], deadline: float) -> tuple[int, list[_Graded]]:
            graded: list[_Graded] = []
            for query in jobs[:per_slice]:
                ranked = searcher.rank_ids(view, SearchRequest(query=query.text, top_k=K))
                graded.append(
                    _Graded(
                        query.kind,
                        recall_at_k(ranked, query.relevance, K),
                        ndcg_at_k(ranked, query.relevance, K),
                    )
                )
                if time.monotonic() >= deadline:
                    break
            return len(graded), graded

        async def searched(done: int) -> None:
            await progress(done, total, f"graded {done}/{total} labelled queries")

        await progress(0, total, f"grading search on {total} labelled queries")
        graded = await in_slices(queries, run_slice, slice_s=self._slice_s, after_slice=searched)
        kinds = sorted({g.kind for g in graded})
        return {
            "available": True,
            "reason": None,
            "queries": len(graded),
            "recall_at_10": _mean([g.recall for g in graded]),
            "ndcg_at_10": _mean([g.ndcg for g in graded]),
            "by_kind": {
                kind: {
                    "queries": sum(1 for g in graded if g.kind == kind),
                    "recall_at_10": _mean([g.recall for g in graded if g.kind == kind]),
                    "ndcg_at_10": _mean([g.ndcg for g in graded if g.kind == kind]),
                }
                for kind in kinds
            },
        }


def _code_checks(outcomes: Sequence[_Verdict]) -> dict[str, Any]:
    total = len(outcomes)
    passed = sum(1 for o in outcomes if not o.failed)
    by_check: dict[str, dict[str, Any]] = {}
    for name in CHECKS:
        ok = total - sum(1 for o in outcomes if name in o.failed)
        by_check[name] = {"passed": ok, "failed": total - ok, "pass_rate": _rate(ok, total)}
    failures = [{"case_id": o.case_id, "failed_checks": list(o.failed)} for o in outcomes if o.failed]
    return {
        "pass_rate": _rate(passed, total),
        "passed": passed,
        "failed": total - passed,
        "by_check": by_check,
        "failures": failures[:MAX_LISTED_FAILURES],
        "failures_truncated": len(failures) > MAX_LISTED_FAILURES,
    }


def _described(baseline: Baseline) -> dict[str, Any]:
    return {
        "baseline_id": baseline.baseline_id,
        "saved_at": _iso(baseline.saved_at_ms),
        "saved_by": baseline.saved_by,
        "figures": baseline.figures,
    }


def _delta(now: Any, then: Any) -> float | None:
    if isinstance(now, int | float) and isinstance(then, int | float):
        return round(float(now) - float(then), 4)
    return None


def _deltas(figures: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    checks_now, checks_then = figures.get("checks", {}), reference.get("checks", {})
    return {
        "code_check_pass_rate": _delta(
            figures["code_check_pass_rate"], reference.get("code_check_pass_rate")
        ),
        "recall_at_10": _delta(figures["recall_at_10"], reference.get("recall_at_10")),
        "ndcg_at_10": _delta(figures["ndcg_at_10"], reference.get("ndcg_at_10")),
        "cases": _delta(figures["cases"], reference.get("cases")),
        "checks": {
            name: _delta(
                checks_now.get(name), checks_then.get(name) if isinstance(checks_then, dict) else None
            )
            for name in CHECKS
        },
    }


def summary(report: dict[str, Any]) -> str:
    """The report in a few lines, for the result's text content."""
    checks = report["code_checks"]
    deltas = report["deltas"] or {}

    def delta(name: str) -> str:
        value = deltas.get(name)
        return "" if value is None else f" ({value:+.4f} vs baseline)"

    lines = [
        f"Code checks: {checks['passed']}/{report['cases']} cases pass every check "
        f"(pass rate {checks['pass_rate']:.4f}{delta('code_check_pass_rate')}).",
    ]
    retrieval = report["retrieval"]
    if retrieval["available"]:
        lines.append(
            f"Retrieval on {retrieval['queries']} labelled queries: recall@10 {retrieval['recall_at_10']:.4f}"
            f"{delta('recall_at_10')}, nDCG@10 {retrieval['ndcg_at_10']:.4f}{delta('ndcg_at_10')}."
        )
    else:
        lines.append(f"Retrieval: {retrieval['reason']}.")
    baseline = report["baseline"]
    lines.append(
        f"Compared with baseline {baseline['baseline_id']} of {baseline['saved_at']}."
        if baseline
        else "No earlier baseline to compare with."
    )
    if report["saved_baseline"]:
        lines.append(f"Saved as baseline {report['saved_baseline']['baseline_id']}.")
    return "\n".join(lines)
