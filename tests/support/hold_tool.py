"""`hold`: a task tool of scope `aml:draft` that waits for one answer (`go`) and returns it, for
tests that need a task which stays `input_required` until they answer it."""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext, elicit_form, request_input
from aml_mcp.catalog.tools import Execution, ToolSpec

SCOPE = "aml:draft"
GO = {"type": "object", "properties": {"go": {"type": "boolean"}}, "required": ["go"]}


def hold_catalog() -> Catalog:
    async def hold(args: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
        answer = await request_input(ctx, "go", elicit_form("Go ahead?", GO))
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(answer))])

    tool = ToolSpec(
        name="hold",
        description="Waits for one answer, as a task.",
        input_schema={"type": "object"},
        body=hold,
        execution=Execution.TASK,
        scope=SCOPE,
    )
    return Catalog(tools=ToolRegistry([tool]))
