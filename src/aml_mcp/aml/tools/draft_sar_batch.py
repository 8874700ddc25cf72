"""`draft_sar_batch` (task, `aml:draft`): drafts the named cases' SARs and checks each draft.

Facts a SAR needs and the notes lack are asked of the analyst in one `input_required` round.
Unknown and foreign case ids get the same "not found" answer. Idempotent: a re-run finds the
analyst's answers stored with the task.

Progress is reported at every step (the runner throttles what reaches the store): each case's notes
read and its facts gathered, what is missing, the question and its answers, each slice of drafts
(a slice takes at most a `PROGRESS_STEPS`th of the cases), and the tally. Messages name counts,
never case ids or facts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio.to_thread
import mcp_types as types

from aml_mcp.aml.evaluation.run import step_size
from aml_mcp.aml.notes.model import CaseNote, InvalidTenantError
from aml_mcp.aml.sar.batches import CheckedDraft, in_slices
from aml_mcp.aml.sar.checks import CheckResult
from aml_mcp.aml.sar.draft import SarDraft
from aml_mcp.aml.sar.facts import CaseFile, build_case_file
from aml_mcp.aml.sar.questions import AnalystFacts, missing_facts, read_answers
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.schema_parts import STRING, _strings
from aml_mcp.aml.tools.scopes import DRAFT
from aml_mcp.aml.tools.service import AmlService
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec

NOT_FOUND = "No case with this id was found in your institution's notes."


def draft_input(max_cases: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "case_ids": {
                "type": "array",
                "items": {"type": "string", "minLength": 1, "maxLength": 128},
                "minItems": 1,
                "maxItems": max_cases,
                "description": "Cases of your institution to draft a SAR for (duplicates are drafted once).",
            }
        },
        "required": ["case_ids"],
        "additionalProperties": False,
    }


def draft_output() -> dict[str, Any]:
    draft = SarDraft.model_json_schema(ref_template="#/$defs/{model}")
    check = CheckResult.model_json_schema(ref_template="#/$defs/{model}")
    defs: dict[str, Any] = {**draft.pop("$defs", {}), "SarDraft": draft, "CheckResult": check}
    return {
        "$defs": defs,
        "type": "object",
        "properties": {
            "cases": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "case_id": STRING,
                        "status": {"enum": ["drafted", "not_found"]},
                        "message": STRING,
                        "passed": {"type": "boolean", "description": "The draft passes every code check."},
                        "draft": {"$ref": "#/$defs/SarDraft"},
                        "text": {"type": "string", "description": "The draft as one document."},
                        "checks": {"type": "array", "items": {"$ref": "#/$defs/CheckResult"}},
                        "unanswered": {
                            **_strings(),
                            "description": "Questions the analyst left unanswered (facts still missing).",
                        },
                    },
                    "required": ["case_id", "status"],
                },
            },
            "drafted": {"type": "integer"},
            "not_found": {"type": "integer"},
            "passed": {"type": "integer"},
        },
        "required": ["cases", "drafted", "not_found", "passed"],
    }


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


def draft_tool(services: AmlService, settings: AmlSettings) -> ToolSpec:
    casework = services.casework

    def notes_of(tenant: str, case_id: str) -> list[CaseNote]:
        """The case's notes in the caller's bank (none for an unknown or foreign case, alike)."""
        try:
            return list(services.store.tenant(tenant).case_notes(case_id))
        except InvalidTenantError:
            return []

    async def read_cases(
        ctx: InvocationContext, tenant: str, case_ids: list[str]
    ) -> dict[str, CaseFile | None]:
        """Each case's facts (None: not found), one case at a time, two steps each."""
        total = len(case_ids)
        await ctx.report_progress(0, total, f"reading {total} case(s)")
        files: dict[str, CaseFile | None] = {}
        for number, case_id in enumerate(case_ids, 1):
            notes = await anyio.to_thread.run_sync(notes_of, tenant, case_id)
            await ctx.report_progress(number - 1, total, f"read the notes of case {number} of {total}")
            files[case_id] = (
                await anyio.to_thread.run_sync(build_case_file, case_id, notes) if notes else None
            )
            await ctx.report_progress(number, total, f"gathered the facts of case {number} of {total}")
        return files

    async def body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        tenant = ctx.principal.tenant
        case_ids = list(dict.fromkeys(str(c) for c in arguments["case_ids"]))
        total = len(case_ids)
        files = await read_cases(ctx, tenant, case_ids)
        missing = [fact for case in files.values() if case is not None for fact in missing_facts(case)]
        answers: AnalystFacts = {}
        if not missing:
            await ctx.report_progress(total, total, "the notes hold every fact the SAR(s) need")
        elif ctx.client_capabilities.elicitation is None:
            await ctx.report_progress(
                total, total, f"{len(missing)} fact(s) missing; this client cannot be asked, drafting without"
            )
        else:
            await ctx.report_progress(total, total, f"asking the analyst for {len(missing)} missing fact(s)")
            answers = read_answers(missing, await ctx.request_inputs({f.key: f.request() for f in missing}))
            await ctx.report_progress(total, total, f"received {len(answers)} of {len(missing)} answer(s)")
        unanswered: dict[str, list[str]] = {}
        for fact in missing:
            if fact.key not in answers:
                unanswered.setdefault(fact.case_id, []).append(fact.key)

        def prepare(case_id: str) -> tuple[CaseFile, AnalystFacts] | None:
            case = files[case_id]
            return None if case is None else (case, answers)

        per_slice = step_size(total)

        def run_slice(
            jobs: Sequence[str], deadline: float
        ) -> tuple[int, list[tuple[str, CheckedDraft | None]]]:
            return casework.draft_slice(tenant, jobs[:per_slice], prepare, deadline)

        async def drafted(done: int) -> None:
            await ctx.report_progress(done, total, f"drafted {done}/{total} cases")

        await ctx.report_progress(0, total, f"drafting {total} case(s)")
        outcomes = await in_slices(
            case_ids, run_slice, slice_s=settings.eval_slice_ms / 1000, after_slice=drafted
        )
        entries = [
            _case_entry(case_id, checked, unanswered.get(case_id, ())) for case_id, checked in outcomes
        ]
        done = sum(1 for e in entries if e["status"] == "drafted")
        passed = sum(1 for e in entries if e.get("passed"))
        text = f"Drafted {done} of {total} case(s); {passed} pass every code check; {total - done} not found."
        await ctx.report_progress(
            total, total, f"drafted {done} of {total} case(s), {passed} passing every check"
        )
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
            read_only_hint=True,
            destructive_hint=False,
            open_world_hint=False,
        ),
        scope=DRAFT,
        execution=Execution.TASK,
        idempotent=True,
        body=body,
    )
