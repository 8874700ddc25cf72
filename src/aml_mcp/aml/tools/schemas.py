"""JSON Schemas (2020-12) of the three AML tools' arguments and results.

Why hand-written input schemas: they are the contract an assistant reads, so each field says
what it means, and `additionalProperties: false` makes any argument the tool does not know — a
`tenant`, say — a refused call rather than a silently ignored one. The SAR draft's part of the
result schema is generated from the pydantic models that build drafts, so the two cannot drift.
"""

from __future__ import annotations

from typing import Any

from aml_mcp.aml.sar.checks import CHECKS, CheckResult
from aml_mcp.aml.sar.draft import SarDraft
from aml_mcp.aml.search.engine import MAX_TOP_K

STRING: dict[str, Any] = {"type": "string"}
NUMBER_OR_NULL: dict[str, Any] = {"type": ["number", "null"]}


def _strings() -> dict[str, Any]:
    return {"type": "array", "items": {"type": "string"}}


def search_input(default_top_k: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
                "description": "What to look for, in any words, or an account id, name or case id.",
            },
            "top_k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_TOP_K,
                "default": default_top_k,
                "description": f"How many notes to return (1-{MAX_TOP_K}).",
            },
            "date_from": {
                "type": "string",
                "maxLength": 40,
                "description": "Earliest note date, inclusive: YYYY-MM-DD or an ISO 8601 date-time.",
            },
            "date_to": {
                "type": "string",
                "maxLength": 40,
                "description": "Latest note date, inclusive: YYYY-MM-DD or an ISO 8601 date-time.",
            },
            "typology": {
                "type": "string",
                "minLength": 1,
                "maxLength": 100,
                "description": "Only notes with this typology code, e.g. structuring or crypto_mixing.",
            },
            "case_id": {
                "type": "string",
                "minLength": 1,
                "maxLength": 128,
                "description": "Only notes of this case.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }


SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "note_id": STRING,
                    "case_id": STRING,
                    "created_at": {"type": "string", "description": "ISO 8601, UTC."},
                    "score": {
                        "type": "number",
                        "description": "Higher is better; exact identifier matches lead.",
                    },
                    "snippet": {
                        "type": "string",
                        "description": "Text around the query's words, **marked**.",
                    },
                    "subjects": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "name": STRING,
                                "account_id": {"type": ["string", "null"]},
                                "role": {"type": ["string", "null"]},
                            },
                            "required": ["name"],
                        },
                    },
                    "matched_subjects": {
                        **_strings(),
                        "description": "Names of the note's subjects the query named (by name or account).",
                    },
                    "matched_identifiers": {
                        **_strings(),
                        "description": "Kinds of exact identifiers from the query found on the note.",
                    },
                    "typologies": _strings(),
                },
                "required": ["note_id", "case_id", "score", "snippet", "subjects", "matched_subjects"],
            },
        }
    },
    "required": ["results"],
}

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
