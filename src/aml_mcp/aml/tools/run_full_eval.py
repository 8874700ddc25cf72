"""`run_full_eval` (task, `aml:eval`): drafts and checks every case, grades retrieval, compares with
(and optionally saves) a baseline. Idempotent: a deterministic function of the data, and saving an
identical result twice stores it once, so a crash re-runs it from the start.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from aml_mcp.aml.evaluation.run import NothingToEvaluate, summary
from aml_mcp.aml.sar.checks import CHECKS
from aml_mcp.aml.tools.schema_parts import NUMBER_OR_NULL, STRING, _strings
from aml_mcp.aml.tools.scopes import EVAL
from aml_mcp.aml.tools.service import AmlService
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec, tool_error

EVAL_INPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "save_as_baseline": {
            "type": "boolean",
            "default": False,
            "description": "Store this run's figures as your institution's new evaluation baseline.",
        }
    },
    "additionalProperties": False,
}

_RATE_ROW = {
    "type": "object",
    "properties": {
        "passed": {"type": "integer"},
        "failed": {"type": "integer"},
        "pass_rate": {"type": "number"},
    },
    "required": ["passed", "failed", "pass_rate"],
}

EVAL_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cases": {"type": "integer"},
        "notes": {"type": "integer"},
        "dataset_fingerprint": STRING,
        "code_checks": {
            "type": "object",
            "properties": {
                "pass_rate": {
                    "type": "number",
                    "description": "Share of cases whose draft passes every check.",
                },
                "passed": {"type": "integer"},
                "failed": {"type": "integer"},
                "by_check": {
                    "type": "object",
                    "properties": {name: _RATE_ROW for name in CHECKS},
                    "required": list(CHECKS),
                },
                "failures": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"case_id": STRING, "failed_checks": _strings()},
                        "required": ["case_id", "failed_checks"],
                    },
                },
                "failures_truncated": {"type": "boolean"},
            },
            "required": ["pass_rate", "passed", "failed", "by_check", "failures"],
        },
        "retrieval": {
            "type": "object",
            "properties": {
                "available": {"type": "boolean"},
                "reason": {"type": ["string", "null"]},
                "queries": {"type": "integer"},
                "recall_at_10": NUMBER_OR_NULL,
                "ndcg_at_10": NUMBER_OR_NULL,
                "by_kind": {"type": "object"},
            },
            "required": ["available", "queries", "recall_at_10", "ndcg_at_10"],
        },
        "baseline": {
            "type": ["object", "null"],
            "properties": {
                "baseline_id": STRING,
                "saved_at": STRING,
                "saved_by": STRING,
                "figures": {"type": "object"},
            },
        },
        "deltas": {
            "type": ["object", "null"],
            "properties": {
                "code_check_pass_rate": NUMBER_OR_NULL,
                "recall_at_10": NUMBER_OR_NULL,
                "ndcg_at_10": NUMBER_OR_NULL,
            },
        },
        "saved_baseline": {
            "type": ["object", "null"],
            "properties": {"baseline_id": STRING, "saved_at": STRING},
        },
    },
    "required": ["cases", "notes", "code_checks", "retrieval", "baseline", "deltas", "saved_baseline"],
}


def eval_tool(services: AmlService) -> ToolSpec:
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
            read_only_hint=False,
            destructive_hint=False,
            open_world_hint=False,
        ),
        scope=EVAL,
        execution=Execution.TASK,
        idempotent=True,
        body=body,
    )
