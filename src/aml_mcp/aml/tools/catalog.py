"""The three AML tools: `search_aml_notes`, `run_full_eval` and `draft_sar_batch`, and their catalog.

Each `ToolSpec` is the single statement of its tool: schemas, scope, execution policy and body.
The tenant a body works on is always `ctx.principal.tenant` — the verified token's — and no
schema admits any other argument (`additionalProperties: false`), so no caller can name a bank.

- `search_aml_notes` (sync, `aml:read`): hybrid search, run in a worker thread.
- `run_full_eval` (task, `aml:eval`): drafts and checks every case, grades retrieval, compares
  with (and optionally saves) a baseline. Idempotent: a deterministic function of the data, and
  saving an identical result twice stores it once, so a crash re-runs it from the start.
- `draft_sar_batch` (task, `aml:draft`): drafts the named cases; facts a SAR needs and the notes
  lack are asked of the analyst in one `input_required` round. Unknown and foreign case ids get
  the same "not found" answer. Idempotent too: a re-run finds the analyst's answers stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import mcp_types as types
from pydantic import ValidationError

from aml_mcp.aml.evaluation.run import NothingToEvaluate, summary
from aml_mcp.aml.note_store import normalise_identifier, normalise_name
from aml_mcp.aml.notes import normalise_typology
from aml_mcp.aml.sar.batches import CheckedDraft, in_slices
from aml_mcp.aml.sar.facts import CaseFile
from aml_mcp.aml.sar.questions import AnalystFacts, missing_facts, read_answers
from aml_mcp.aml.search.engine import SearchHit, SearchRequest
from aml_mcp.aml.search.identifiers import identifier_candidates
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.schemas import (
    EVAL_INPUT,
    EVAL_OUTPUT,
    SEARCH_OUTPUT,
    draft_input,
    draft_output,
    search_input,
)
from aml_mcp.aml.tools.service import AmlServices
from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec

READ, EVAL, DRAFT = "aml:read", "aml:eval", "aml:draft"
NOT_FOUND = "No case with this id was found in your institution's notes."


def tool_error(text: str) -> types.CallToolResult:
    """A tool execution error: the assistant reads it and can correct the call."""
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def _validation_text(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        lines.append(f"- {where}: {err['msg']}")
    return "Invalid arguments:\n" + "\n".join(lines)


# -- search_aml_notes ---------------------------------------------------------------------------


def _matched_subjects(hit: SearchHit, query: str) -> list[str]:
    candidates = set(identifier_candidates(query))
    spoken = f" {normalise_name(query)} "
    return [
        s.name
        for s in hit.subjects
        if normalise_name(s.name) in candidates
        or f" {normalise_name(s.name)} " in spoken
        or (s.account_id is not None and normalise_identifier(s.account_id) in candidates)
    ]


def _search_result(hit: SearchHit, query: str) -> dict[str, Any]:
    """One hit on the wire (dates of birth stay out of search results: finding a note needs none)."""
    return {
        "note_id": hit.note_id,
        "case_id": hit.case_id,
        "created_at": hit.created_at,
        "score": hit.score,
        "snippet": hit.snippet,
        "subjects": [{"name": s.name, "account_id": s.account_id, "role": s.role} for s in hit.subjects],
        "matched_subjects": _matched_subjects(hit, query),
        "matched_identifiers": hit.matched_identifiers,
        "typologies": hit.typologies,
    }


def search_tool(services: AmlServices, settings: AmlSettings) -> ToolSpec:
    async def body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        try:
            request = SearchRequest.model_validate({"top_k": settings.search_default_top_k, **arguments})
        except ValidationError as exc:
            return tool_error(_validation_text(exc))
        if request.typology is not None and not normalise_typology(request.typology):
            # It would normalise to no code at all, which the dense half of the search reads as "no filter".
            return tool_error("Invalid arguments:\n- typology: must contain a letter or digit")
        hits = await services.search(ctx.principal.tenant, request)
        results = [_search_result(hit, request.query) for hit in hits]
        lines = [
            f"{i}. {r['note_id']} (case {r['case_id']}, {r['created_at'][:10]}, score {r['score']:.3f}): "
            f"{r['snippet']}"
            for i, r in enumerate(results, start=1)
        ]
        return types.CallToolResult(
            content=[types.TextContent(text="\n".join(lines) or "No matching notes.")],
            structured_content={"results": results},
        )

    return ToolSpec(
        name="search_aml_notes",
        title="Search AML case notes",
        description=(
            "Search your institution's AML case notes: hybrid keyword and meaning search, with exact "
            "matches on account ids, subject names and case ids ranked first. Optional filters: note "
            "date range, typology code, case id. Returns notes with a highlighted snippet and the "
            "subjects the query named."
        ),
        input_schema=search_input(settings.search_default_top_k),
        output_schema=SEARCH_OUTPUT,
        annotations=types.ToolAnnotations(
            title="Search AML case notes",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
        scope=READ,
        execution=Execution.SYNC,
        idempotent=True,
        body=body,
    )


# -- run_full_eval ------------------------------------------------------------------------------


def eval_tool(services: AmlServices) -> ToolSpec:
    async def body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        try:
            report = await services.evaluator.run(
                ctx.principal,
                save_as_baseline=arguments.get("save_as_baseline") is True,
                progress=ctx.report_progress,
            )
        except NothingToEvaluate:
            return tool_error(
                "There are no case notes for your institution to evaluate; an operator loads them "
                "with `aml-mcp ingest`."
            )
        return types.CallToolResult(
            content=[types.TextContent(text=summary(report))], structured_content=report
        )

    return ToolSpec(
        name="run_full_eval",
        title="Evaluate SAR drafting and search",
        description=(
            "Runs as a task over your institution's whole dataset: drafts every case's SAR and runs the "
            "code checks (required fields, amounts and dates consistent with the notes, dates inside the "
            "case window, valid typology codes, who/what/when/where/why/how covered, no other "
            "institution's identifiers), grades search on the labelled query set where one exists "
            "(recall@10, nDCG@10), and compares with the stored baseline. Set save_as_baseline to make "
            "this run the new baseline. Progress is in the task's status message; it can be cancelled."
        ),
        input_schema=EVAL_INPUT,
        output_schema=EVAL_OUTPUT,
        annotations=types.ToolAnnotations(
            title="Evaluate SAR drafting and search",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
        scope=EVAL,
        execution=Execution.TASK,
        idempotent=True,
        body=body,
    )


# -- draft_sar_batch ----------------------------------------------------------------------------


def _case_entry(case_id: str, checked: CheckedDraft | None, unanswered: Sequence[str]) -> dict[str, Any]:
    if checked is None:
        return {"case_id": case_id, "status": "not_found", "message": NOT_FOUND}
    return {
        "case_id": case_id,
        "status": "drafted",
        "passed": checked.passed,
        "draft": checked.draft.model_dump(mode="json"),
        "text": checked.draft.text(),
        "checks": [c.model_dump(mode="json") for c in checked.checks],
        "unanswered": list(unanswered),
    }


def draft_tool(services: AmlServices, settings: AmlSettings) -> ToolSpec:
    casework = services.casework

    async def body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        tenant = ctx.principal.tenant
        case_ids = list(dict.fromkeys(str(c) for c in arguments["case_ids"]))
        total = len(case_ids)
        await ctx.report_progress(0, total, f"reading {total} case(s)")
        files: dict[str, CaseFile | None] = await anyio.to_thread.run_sync(
            lambda: {case_id: casework.load(tenant, case_id) for case_id in case_ids}
        )
        missing = [fact for case in files.values() if case is not None for fact in missing_facts(case)]
        answers: AnalystFacts = {}
        if missing and ctx.client_capabilities.elicitation is not None:
            await ctx.report_progress(0, total, f"asking the analyst for {len(missing)} missing fact(s)")
            answers = read_answers(missing, await ctx.request_inputs({f.key: f.request() for f in missing}))
        unanswered: dict[str, list[str]] = {}
        for fact in missing:
            if fact.key not in answers:
                unanswered.setdefault(fact.case_id, []).append(fact.key)

        def prepare(case_id: str) -> tuple[CaseFile, AnalystFacts] | None:
            case = files[case_id]
            return None if case is None else (case, answers)

        def run_slice(
            jobs: Sequence[str], deadline: float
        ) -> tuple[int, list[tuple[str, CheckedDraft | None]]]:
            return casework.draft_slice(tenant, jobs, prepare, deadline)

        async def drafted(done: int) -> None:
            await ctx.report_progress(done, total, f"drafted {done}/{total} cases")

        outcomes = await in_slices(
            case_ids, run_slice, slice_s=settings.eval_slice_ms / 1000, after_slice=drafted
        )
        entries = [
            _case_entry(case_id, checked, unanswered.get(case_id, ())) for case_id, checked in outcomes
        ]
        done = sum(1 for e in entries if e["status"] == "drafted")
        passed = sum(1 for e in entries if e.get("passed"))
        text = f"Drafted {done} of {total} case(s); {passed} pass every code check; {total - done} not found."
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content={
                "cases": entries,
                "drafted": done,
                "not_found": total - done,
                "passed": passed,
            },
        )

    return ToolSpec(
        name="draft_sar_batch",
        title="Draft SARs for cases",
        description=(
            "Runs as a task: drafts a FinCEN-style Suspicious Activity Report for each of your "
            "institution's cases named (subject information; suspicious activity summary answering who, "
            "what, when, where, why and how; transaction details; typology; law-enforcement contact and "
            "filing institution placeholders), built from the case notes, and runs the code checks on "
            "each draft. When a case lacks a fact the SAR needs (a subject's date of birth, which account "
            "a subject holds) the task asks the analyst in an elicitation form. Case ids that are not "
            "your institution's are reported as not found."
        ),
        input_schema=draft_input(settings.draft_max_cases),
        output_schema=draft_output(),
        annotations=types.ToolAnnotations(
            title="Draft SARs for cases",
            read_only_hint=True,
            destructive_hint=False,
            idempotent_hint=True,
            open_world_hint=False,
        ),
        scope=DRAFT,
        execution=Execution.TASK,
        idempotent=True,
        body=body,
    )


def aml_catalog(services: AmlServices, settings: AmlSettings) -> Catalog:
    """The AML server's catalog: the three tools, in the order `tools/list` shows them."""
    return Catalog(
        tools=ToolRegistry(
            [search_tool(services, settings), eval_tool(services), draft_tool(services, settings)]
        )
    )
