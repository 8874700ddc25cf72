"""Wires the catalog into the SDK's low-level `Server`.

The SDK already owns the `_meta` envelope, header/body equality, version errors, SSE framing and
`server/discover`. This module owns what it lacks: tool dispatch by execution policy, argument
validation, multi round-trip inputs, cache hints, and the middleware that keeps a legacy
`params.task` from ever meaning anything.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, TypeVar

import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from mcp_types.methods import CACHEABLE_METHODS
from pydantic import ValidationError

from aml_mcp._version import __version__
from aml_mcp.catalog import Catalog
from aml_mcp.catalog.tools import Execution, ToolOutcome, ToolSpec, tool_error
from aml_mcp.principal import Principal
from aml_mcp.protocol.capabilities import declared, declares_tasks
from aml_mcp.protocol.errors import invalid_params, missing_tasks_extension
from aml_mcp.protocol.fault_answers import StorageFaultAnswers
from aml_mcp.protocol.idempotency import idempotency_key
from aml_mcp.protocol.request import request_principal
from aml_mcp.protocol.round_trip import InputRequired, RoundTripContext

SERVER_NAME = "aml-mcp"
T = TypeVar("T")
logger = logging.getLogger(__name__)


class TaskStarter(Protocol):
    """Creates a durable task for a tool call and answers with the flat `CreateTaskResult`."""

    async def start(
        self,
        tool: ToolSpec,
        arguments: dict[str, Any],
        *,
        principal: Principal,
        client_capabilities: types.ClientCapabilities,
        answers: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> dict[str, Any]: ...


def _owner_binding(ctx: ServerRequestContext[Any, Any]) -> str:
    """Binds a sealed `requestState` to the full owner, so it cannot be replayed by anyone else."""
    owner = request_principal(ctx).owner
    return json.dumps([owner.issuer, owner.subject, owner.tenant, owner.client_id])


async def strip_legacy_task_param(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    """A pre-2026 `params.task` on tools/call is removed before validation: it never opts in, never fails."""
    params = ctx.params
    if ctx.method == "tools/call" and isinstance(params, Mapping) and "task" in params:
        ctx = replace(ctx, params={key: value for key, value in params.items() if key != "task"})
    return await call_next(ctx)


def _round_trip_context(ctx: ServerRequestContext[Any, Any], request_state: str | None) -> RoundTripContext:
    """The SDK parses `inputResponses` into a union of result models, guessing which is which; the
    raw values are kept instead and checked against the method each key was actually asked with."""
    session = ctx.session
    raw = ctx.params.get("inputResponses") if isinstance(ctx.params, Mapping) else None

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        await session.report_progress(progress, total, message)

    async def log(level: types.LoggingLevel, data: Any) -> None:
        await session.send_log_message(level, data, related_request_id=ctx.request_id)

    return RoundTripContext(
        principal=request_principal(ctx),
        client_capabilities=declared(ctx),
        input_responses=raw if isinstance(raw, Mapping) else None,
        request_state=request_state,
        progress=progress,
        log=log,
    )


def _invalid_arguments(errors: Sequence[str]) -> types.CallToolResult:
    """Argument errors are tool execution errors, so the model can correct itself and retry."""
    return tool_error("Invalid arguments:\n" + "\n".join(f"- {error}" for error in errors[:20]))


async def _guarded(outcome: Awaitable[T]) -> T:
    """A body that trips over its own pydantic models has a bug; the SDK would blame the client (-32602)."""
    try:
        return await outcome
    except ValidationError:
        logger.exception("a tool or prompt body built an invalid model")
        raise MCPError(code=INTERNAL_ERROR, message="Internal error") from None


def _tool_result(outcome: ToolOutcome) -> types.CallToolResult:
    """A body may return a `CallToolResult` or its plain-dict form (as a task body may): the same
    result either way, validated here, so the wire always carries a well-formed result."""
    if isinstance(outcome, types.CallToolResult):
        return outcome
    try:
        return types.CallToolResult.model_validate(outcome)
    except ValidationError:
        logger.exception("a tool body returned an invalid result")
        raise MCPError(code=INTERNAL_ERROR, message="Tool returned an invalid result") from None


class Handlers:
    """The request handlers, reading everything from the catalog."""

    def __init__(self, catalog: Catalog, tasks: TaskStarter | None) -> None:
        self.catalog = catalog
        self.tasks = tasks

    async def list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[tool.wire for tool in self.catalog.tools])

    async def call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> HandlerResult:
        tool = self.catalog.tools.get(params.name)
        if tool is None:
            raise invalid_params(f"Unknown tool: {params.name}")
        capabilities = declared(ctx)
        tasks_declared = declares_tasks(capabilities)
        if tool.execution is Execution.TASK and not tasks_declared:
            raise missing_tasks_extension()
        key = idempotency_key(params.meta)  # checked for every tool; only a task create keeps it
        arguments = dict(params.arguments or {})
        try:
            errors = tool.argument_errors(arguments)
        except Exception as error:
            # The validator gives up on some hostile arguments (the HTTP edge refuses the ones known
            # today: lone surrogates, deep nesting). Still the caller's input: a tool error, one log line.
            logger.info("arguments of %s could not be validated: %s", tool.name, type(error).__name__)
            errors = ["(arguments): could not be validated; send plain JSON values without deep nesting"]
        if errors:
            return _invalid_arguments(errors)
        run_ctx = _round_trip_context(ctx, params.request_state)
        as_task = tool.execution is Execution.TASK or (tool.execution is Execution.AUTO and tasks_declared)
        try:
            if not as_task:
                return _tool_result(await _guarded(tool.body(arguments, run_ctx)))
            if self.tasks is None:
                raise MCPError(code=INTERNAL_ERROR, message="Tasks are not available on this server")
            if tool.preflight is not None:
                await tool.preflight(arguments, run_ctx)
            return await self.tasks.start(
                tool,
                arguments,
                principal=run_ctx.principal,
                client_capabilities=capabilities,
                answers=run_ctx.answers,
                idempotency_key=key,
            )
        except InputRequired as needed:
            return needed.result()

    async def list_prompts(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListPromptsResult:
        assert self.catalog.prompts is not None
        return types.ListPromptsResult(prompts=[prompt.wire for prompt in self.catalog.prompts])

    async def get_prompt(
        self, ctx: ServerRequestContext[Any, Any], params: types.GetPromptRequestParams
    ) -> HandlerResult:
        assert self.catalog.prompts is not None
        prompt = self.catalog.prompts.get(params.name)
        if prompt is None:
            raise invalid_params(f"Unknown prompt: {params.name}")
        arguments = dict(params.arguments or {})
        missing = prompt.missing_arguments(arguments)
        if missing:
            raise invalid_params(f"Missing required prompt arguments: {', '.join(missing)}")
        run_ctx = _round_trip_context(ctx, params.request_state)
        try:
            return await _guarded(prompt.body(arguments, run_ctx))
        except InputRequired as needed:
            return needed.result()

    async def list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        assert self.catalog.resources is not None
        return types.ListResourcesResult(resources=[r.wire for r in self.catalog.resources.resources()])

    async def list_resource_templates(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        assert self.catalog.resources is not None
        return types.ListResourceTemplatesResult(
            resource_templates=[t.wire for t in self.catalog.resources.templates()]
        )

    async def read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        assert self.catalog.resources is not None
        uri = str(params.uri)
        contents = await self.catalog.resources.read(uri)
        if contents is None:
            raise invalid_params("Resource not found", {"uri": uri})
        return types.ReadResourceResult(contents=contents)

    async def complete(
        self, ctx: ServerRequestContext[Any, Any], params: types.CompleteRequestParams
    ) -> types.CompleteResult:
        values: list[str] = []
        ref = params.ref
        if isinstance(ref, types.PromptReference) and self.catalog.prompts is not None:
            prompt = self.catalog.prompts.get(ref.name)
            if prompt is not None:
                prefix = params.argument.value
                values = [v for v in prompt.completions.get(params.argument.name, ()) if v.startswith(prefix)]
        return types.CompleteResult(
            completion=types.Completion(values=values[:100], total=len(values), has_more=len(values) > 100)
        )


def build_server(
    *,
    catalog: Catalog,
    list_ttl_ms: int,
    cache_scope: str,
    request_state_keys: Sequence[bytes],
    tasks: TaskStarter | None = None,
    extensions: Mapping[str, dict[str, Any]] | None = None,
    middleware: Sequence[ServerMiddleware[Any]] = (),
) -> Server[Any]:
    """A low-level SDK `Server` serving `catalog`.

    `middleware` runs outermost but for `StorageFaultAnswers` (a handler's storage fault answered as
    the retryable storage error), before the request-state boundary and the legacy-param strip.
    The SDK's default OpenTelemetry middleware is dropped: it costs CPU on every request and this
    server exports no spans.
    """
    handlers = Handlers(catalog, tasks)
    hint = CacheHint(ttl_ms=list_ttl_ms, scope="public" if cache_scope == "public" else "private")
    server: Server[Any] = Server(
        SERVER_NAME,
        version=__version__,
        title="AML MCP server",
        cache_hints={method: hint for method in CACHEABLE_METHODS},  # type: ignore[misc]
        get_tool_input_schema=catalog.tools.input_schema,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,  # type: ignore[arg-type]
        on_list_prompts=handlers.list_prompts if catalog.prompts is not None else None,
        on_get_prompt=handlers.get_prompt if catalog.prompts is not None else None,  # type: ignore[arg-type]
        on_list_resources=handlers.list_resources if catalog.resources is not None else None,
        on_list_resource_templates=handlers.list_resource_templates
        if catalog.resources is not None
        else None,
        on_read_resource=handlers.read_resource if catalog.resources is not None else None,
        on_completion=handlers.complete if catalog.completions else None,
    )
    server.extensions = {key: dict(value) for key, value in (extensions or {}).items()}
    security = RequestStateSecurity(keys=list(request_state_keys), bind_principal=_owner_binding)
    server.middleware = [
        StorageFaultAnswers(),
        *middleware,
        RequestStateBoundary(security, default_audience=SERVER_NAME),
        strip_legacy_task_param,
    ]
    return server
