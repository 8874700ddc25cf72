"""The AML server's catalog: its three tools, in the order `tools/list` shows them, and its scopes.

Each `ToolSpec` is the single statement of its tool: schemas, scope, execution policy and body.
The tenant a body works on is always `ctx.principal.tenant` — the verified token's — and no
schema admits any other argument (`additionalProperties: false`), so no caller can name a bank.
"""

from __future__ import annotations

from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.draft_sar_batch import draft_tool
from aml_mcp.aml.tools.run_full_eval import eval_tool
from aml_mcp.aml.tools.scopes import SCOPE_HIERARCHY
from aml_mcp.aml.tools.search_aml_notes import search_tool
from aml_mcp.aml.tools.service import AmlService
from aml_mcp.catalog import Catalog, ToolRegistry


def aml_catalog(service: AmlService, settings: AmlSettings) -> Catalog:
    return Catalog(
        tools=ToolRegistry(
            [search_tool(service, settings), eval_tool(service), draft_tool(service, settings)]
        ),
        scope_hierarchy=SCOPE_HIERARCHY,
    )
