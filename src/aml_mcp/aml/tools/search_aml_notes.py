"""`search_aml_notes` (sync, `aml:read`): hybrid search over the caller's bank's notes.

Its input schema is generated from `SearchRequest`, the model the body validates with, so the
contract and the validation cannot drift. The search and the rendering of its hits run together
in a worker thread, never on the event loop. Which subjects the query named comes with each hit
from the search, which computed the query's identifier candidates once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mcp_types as types
from pydantic import ValidationError

from aml_mcp.aml.notes.model import NotesDamagedError, normalise_typology
from aml_mcp.aml.search.engine import SearchHit, SearchRequest
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.schema_parts import STRING, _strings
from aml_mcp.aml.tools.scopes import READ
from aml_mcp.aml.tools.service import AmlService
from aml_mcp.catalog.arguments import arguments_schema
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import Execution, ToolSpec, tool_error

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


def _validation_text(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        lines.append(f"- {where}: {err['msg']}")
    return "Invalid arguments:\n" + "\n".join(lines)


# -- search_aml_notes ---------------------------------------------------------------------------


def _search_result(hit: SearchHit) -> dict[str, Any]:
    """One hit on the wire (dates of birth stay out of search results: finding a note needs none)."""
    return {
        "note_id": hit.note_id,
        "case_id": hit.case_id,
        "created_at": hit.created_at,
        "score": hit.score,
        "snippet": hit.snippet,
        "subjects": [{"name": s.name, "account_id": s.account_id, "role": s.role} for s in hit.subjects],
        "matched_subjects": hit.matched_subjects,
        "matched_identifiers": hit.matched_identifiers,
        "typologies": hit.typologies,
    }


def render_results(hits: Sequence[SearchHit]) -> types.CallToolResult:
    """The tool result for `hits` (run in the search's worker thread, not on the event loop)."""
    results = [_search_result(hit) for hit in hits]
    lines = [
        f"{i}. {r['note_id']} (case {r['case_id']}, {r['created_at'][:10]}, score {r['score']:.3f}): "
        f"{r['snippet']}"
        for i, r in enumerate(results, start=1)
    ]
    return types.CallToolResult(
        content=[types.TextContent(text="\n".join(lines) or "No matching notes.")],
        structured_content={"results": results},
    )


NOTES_DAMAGED = (
    "The case-notes store is damaged, so search is unavailable until an operator restores it from a backup."
)


def search_tool(services: AmlService, settings: AmlSettings) -> ToolSpec:
    async def body(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        try:
            request = SearchRequest.model_validate({"top_k": settings.search_default_top_k, **arguments})
        except ValidationError as exc:
            return tool_error(_validation_text(exc))
        if request.typology is not None and not normalise_typology(request.typology):
            # It would normalise to no code at all, which the dense half of the search reads as "no filter".
            return tool_error("Invalid arguments:\n- typology: must contain a letter or digit")
        try:
            return await services.search_and_render(ctx.principal.tenant, request, render_results)
        except NotesDamagedError:
            return tool_error(NOTES_DAMAGED)
        # A notes store out of reach (NotesUnavailableError) is a storage fault, not the tool's
        # answer: the server answers the request 503 with Retry-After, and the client retries it.

    return ToolSpec(
        name="search_aml_notes",
        title="Search AML case notes",
        description=(
            "Search your institution's AML case notes: hybrid keyword and meaning search, with exact "
            "matches on account ids, subject names and case ids ranked first. Optional filters: note "
            "date range, typology code, case id. Returns notes with a highlighted snippet and the "
            "subjects the query named."
        ),
        input_schema=arguments_schema(SearchRequest, top_k=settings.search_default_top_k),
        output_schema=SEARCH_OUTPUT,
        annotations=types.ToolAnnotations(
            read_only_hint=True,
            destructive_hint=False,
            open_world_hint=False,
        ),
        scope=READ,
        execution=Execution.SYNC,
        idempotent=True,
        body=body,
    )
