"""The client↔server contract check: what the client builds and what the server registered agree.

Given a running server and a `ClientPlan` — the arguments the client sends to each tool and the
scope it asks a token for — the check calls every tool the server lists through `McpClient` over
real HTTP and returns each disagreement it finds (an empty list is agreement):

- the request the client put on the wire validates against the tool's `inputSchema`;
- the result validates against its `outputSchema`;
- capabilities: what the server demands (-32021 `requiredCapabilities`, the Tasks extension for a
  task) the client declared, and what the client uses (tasks, listen) the server declared;
- scopes: the scope the client asks for equals the tool's `_meta` required scope and the scope the
  server's 403 challenge names (`scope=` in `WWW-Authenticate`) for a token without it;
- trace: the W3C trace id the client sent in `_meta.traceparent` is in the audit record of the call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import httpx2
import jsonschema
import mcp_types as types
from mcp.shared.exceptions import MCPError

from aml_mcp.client import TASKS_EXTENSION, McpClient, TaskHandle, new_traceparent
from tests.support.aml_live import mcp_url
from tests.support.mcp_http import TASKS_ONLY, message, post
from tests.support.oauth import SecuredServer
from tests.support.waiting import eventually

REQUIRED_SCOPE_META = "aml-mcp/requiredScope"
"""Where the server states each tool's scope in `tools/list` (read from the wire, not imported)."""


@dataclass
class ClientPlan:
    """What the client side builds: per tool, the arguments it sends and the scope it asks for."""

    arguments: dict[str, dict[str, Any]]
    scopes: dict[str, str]
    tasks: bool = True
    """Whether the client declares the Tasks extension."""


@dataclass
class WireLog:
    """The JSON bodies of the client's `tools/call` requests, as sent (an HTTP hook)."""

    calls: list[dict[str, Any]] = field(default_factory=list)

    async def __call__(self, request: httpx2.Request) -> None:
        if request.headers.get("mcp-method") == "tools/call":
            self.calls.append(json.loads(request.content))


def _challenged_scope(
    server: SecuredServer, tool: str, arguments: dict[str, Any], subject: str
) -> str | None:
    """The `scope=` of the 403 a token holding no scope gets for `tools/call tool`."""
    token = server.mint(tenant="meridian-bank", scope="", subject=subject)
    body = message("tools/call", {"name": tool, "arguments": arguments}, capabilities=TASKS_ONLY)
    with httpx.Client(base_url=server.url, timeout=15) as http:
        response = post(http, body, token=token)
    if response.status_code != 403:
        return None
    found = re.search(r'scope="([^"]*)"', response.headers.get("www-authenticate", ""))
    return found.group(1) if found else None


def check_contract(
    server: SecuredServer, plan: ClientPlan, token_for: Callable[[str], str], tenant_subject: str = "contract"
) -> list[str]:
    """Every disagreement between `plan` (the client side) and `server`; empty when they agree."""
    problems: list[str] = []
    listing_token = token_for(" ".join(sorted(set(plan.scopes.values()))))

    async def run() -> None:
        wire = WireLog()
        async with (
            httpx2.AsyncClient(
                timeout=httpx2.Timeout(30, read=300),
                headers={"authorization": f"Bearer {listing_token}"},
                event_hooks={"request": [wire]},
            ) as http,
            McpClient(mcp_url(server), http_client=http, tasks=plan.tasks) as client,
        ):
            declared = client.sdk.session._build_capabilities(client.sdk.protocol_version)
            client_extensions = declared.extensions or {}
            server_extensions = client.server_capabilities.extensions or {}
            if plan.tasks and TASKS_EXTENSION not in server_extensions:
                problems.append("the client uses the Tasks extension; the server does not declare it")
            tools = await client.list_tools()
            for tool in tools:
                await _check_tool(server, plan, tool, token_for, client_extensions, problems, wire)

    anyio.run(run)
    return problems


async def _check_tool(
    server: SecuredServer,
    plan: ClientPlan,
    tool: types.Tool,
    token_for: Callable[[str], str],
    client_extensions: dict[str, Any],
    problems: list[str],
    wire: WireLog,
) -> None:
    name = tool.name
    if name not in plan.arguments:
        problems.append(f"{name}: the server registers it; the client has no call for it")
        return
    arguments = plan.arguments[name]
    asked = plan.scopes.get(name)
    required = (tool.meta or {}).get(REQUIRED_SCOPE_META)
    if asked != required:
        problems.append(
            f"{name}: the client asks for scope {asked!r}; the tool's _meta requires {required!r}"
        )
    challenged = _challenged_scope(server, name, arguments, "contract-probe")
    if challenged is not None and set(challenged.split()) != set((asked or "").split()):
        problems.append(
            f"{name}: the client asks for scope {asked!r}; the server's 403 demands {challenged!r}"
        )
    traceparent = new_traceparent()
    sent_before = len(wire.calls)
    token = token_for(asked or "")
    http = httpx2.AsyncClient(
        timeout=httpx2.Timeout(30, read=300),
        headers={"authorization": f"Bearer {token}"},
        event_hooks={"request": [wire]},
    )
    async with http, McpClient(mcp_url(server), http_client=http, tasks=plan.tasks) as client:
        mark = server.audit_mark()
        was_task = False
        try:
            outcome = await client.call_tool(name, arguments, traceparent=traceparent)
            was_task = isinstance(outcome, TaskHandle)
            result = await outcome.result() if isinstance(outcome, TaskHandle) else outcome
        except MCPError as error:
            data = error.error.data if isinstance(error.error.data, dict) else {}
            demanded = data.get("requiredCapabilities")
            if demanded is not None:
                problems.append(f"{name}: the server demands capabilities {demanded}; the client lacks them")
            else:
                problems.append(f"{name}: the server refused the client's call: {error}")
            result = None
        if was_task and TASKS_EXTENSION not in client_extensions:
            problems.append(
                f"{name}: the server answered with a task; the client did not declare the extension"
            )
    for body in wire.calls[sent_before:]:
        sent = body["params"].get("arguments") or {}
        for error in jsonschema.Draft202012Validator(tool.input_schema).iter_errors(sent):
            problems.append(f"{name}: the request the client built breaks inputSchema: {error.message}")
    if result is not None:
        if result.is_error:
            problems.append(f"{name}: the tool returned isError: {result.content}")
        elif tool.output_schema is not None:
            if result.structured_content is None:
                problems.append(f"{name}: outputSchema declared; the result has no structuredContent")
            else:
                validator = jsonschema.Draft202012Validator(tool.output_schema)
                for error in validator.iter_errors(result.structured_content):
                    problems.append(f"{name}: the result breaks outputSchema: {error.message}")
    trace_id = traceparent.split("-")[1]

    def traced() -> bool:
        # A call answered at once leaves the gate's allow (its target: the tool); a task tool's
        # leaves one `task_created` (its target: the task; the tool in its detail).
        calls = server.audit(since=mark, method="tools/call", decision="allow")
        ours = [e for e in calls if e["target"] == name or (e["detail"] or {}).get("tool") == name]
        return any((e["detail"] or {}).get("trace_id") == trace_id for e in ours)

    try:
        eventually(traced, timeout=3.0, what="the call's audit record")
    except AssertionError:
        problems.append(f"{name}: the audit record of the call lacks the client's trace id {trace_id}")
