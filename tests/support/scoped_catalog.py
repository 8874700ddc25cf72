"""A test catalog with one tool per AML scope, and the AML scope hierarchy.

Each tool answers with the principal it ran as, so tests can see that the verified identity — and
nothing from the request body — is what reaches tool code.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from aml_mcp.aml.tools.scopes import SCOPE_HIERARCHY
from aml_mcp.catalog import Catalog, ToolRegistry
from aml_mcp.catalog.invocation import InvocationContext
from aml_mcp.catalog.tools import ToolSpec

SCOPED_TOOLS = {"probe_read": "aml:read", "probe_eval": "aml:eval", "probe_draft": "aml:draft"}


async def _whoami(arguments: dict[str, Any], ctx: InvocationContext) -> types.CallToolResult:
    p = ctx.principal
    return types.CallToolResult(
        content=[types.TextContent(text=f"{p.subject}@{p.tenant} via {p.client_id}")],
        structured_content={
            "issuer": p.issuer,
            "subject": p.subject,
            "tenant": p.tenant,
            "client_id": p.client_id,
            "scopes": sorted(p.scopes),
        },
    )


def scoped_catalog() -> Catalog:
    tools = ToolRegistry(
        ToolSpec(
            name=name,
            description=f"test tool needing {scope}",
            input_schema={"type": "object", "properties": {}},
            body=_whoami,
            scope=scope,
        )
        for name, scope in SCOPED_TOOLS.items()
    )
    tools.add(
        ToolSpec(
            name="probe_open",
            description="test tool any authenticated caller may use",
            input_schema={"type": "object", "properties": {}},
            body=_whoami,
        )
    )
    return Catalog(tools=tools, scope_hierarchy=SCOPE_HIERARCHY)
