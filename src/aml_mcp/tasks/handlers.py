"""The `tasks/*` protocol surface and the task side of `tools/call`.

Each request is judged on its own, in a fixed order: the extension must be declared in this
request's `_meta` (-32021, before anything is looked up); `params.taskId` must be a string and
the `Mcp-Name` header must carry exactly it (-32020, which the SDK sends as HTTP 400 — the SDK
itself checks `Mcp-Name` only for tools, prompts and resources); then the task is looked up by
id and owner in one query, and unknown, foreign and expired ids all get the same -32602 with
the same message (an id that cannot be a task id — too long, or not valid Unicode — is never
looked up and gets that same answer). The scope check happened earlier, at the HTTP gate, by the
rule these handlers hand the composition root (`TaskHandlers.scope_rules`). Every decision is
audited, once per request: the gate's allow of a `tasks/*` request waits for the handler's record,
which takes its place (`audit.decisions`). `tasks/list` and `tasks/result` are deliberately not
registered: the SDK answers them -32601.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import HEADER_MISMATCH
from pydantic import ConfigDict, Field

from aml_mcp.audit import AuditEvent, AuditRecorder, Decision, task_reference
from aml_mcp.audit.decisions import decided
from aml_mcp.catalog.tools import ToolSpec
from aml_mcp.http.wellformed import escaped
from aml_mcp.principal import Owner, Principal
from aml_mcp.protocol.capabilities import declared, declares_tasks
from aml_mcp.protocol.errors import invalid_params, missing_tasks_extension
from aml_mcp.protocol.request import request_principal
from aml_mcp.scope_rules import NO_SCOPES, ScopeRule
from aml_mcp.subscriptions.filters import lookupable
from aml_mcp.tasks.model import TaskRecord
from aml_mcp.tasks.service import CancelVerdict, TaskService, UpdateVerdict, answers_too_large
from aml_mcp.tasks.wire import ack, create_task_result, detailed_task

TASK_NOT_FOUND = "Task not found"
"""The one answer for unknown, foreign and expired ids alike."""
TASK_METHODS = ("tasks/get", "tasks/update", "tasks/cancel")


@dataclass(frozen=True, slots=True)
class _GateLookup:
    """What the scope rule read of a `tasks/get`'s task (None: unknown, foreign or expired), for the
    handler of the same request: one lookup per get, not one at the gate and one in the handler."""

    task_id: str
    owner: Owner
    task: TaskRecord | None


_gate_lookup: ContextVar[_GateLookup | None] = ContextVar("aml_mcp_tasks_gate_lookup", default=None)
"""Set by the rule in the request's own context, which the handler's task inherits (the gate runs
before the request reaches the MCP layer); taken once by that handler."""


def _take_gate_lookup(task_id: str, owner: Owner) -> _GateLookup | None:
    """The rule's lookup of this very task for this very owner, if this request made one; taken, so
    it is never used twice."""
    found = _gate_lookup.get()
    if found is None:
        return None
    _gate_lookup.set(None)
    return found if found.task_id == task_id and found.owner == owner else None


class TaskIdParams(types.RequestParams):
    """Kept loose so that negotiation and routing are judged before the shape of the params."""

    model_config = ConfigDict(extra="allow")
    task_id: Any = Field(default=None, alias="taskId")


class UpdateTaskParams(TaskIdParams):
    input_responses: Any = Field(default=None, alias="inputResponses")


class TaskHandlers:
    """Implements `TaskStarter` for `tools/call` and serves `tasks/get|update|cancel`."""

    def __init__(self, service: TaskService, audit: AuditRecorder, poll_interval_ms: int) -> None:
        self._service = service
        self._record = audit
        self._poll_ms = poll_interval_ms

    @property
    def scope_rules(self) -> dict[str, ScopeRule]:
        """`tasks/*` needs the scope of the tool that created the task, checked with *this* request's token.

        The rule looks the task up by id and owner (one query, like every task lookup); an unknown,
        foreign or expired id needs no scope, so it goes on to fail as unknown — the gate never
        reveals that somebody else's task exists. A request that did not declare the extension
        needs no scope either: it is refused with -32021 before any lookup. For `tasks/get` the
        rule reads the whole task and leaves it to the handler of the same request, which then
        answers from it instead of reading it again.
        """
        service = self._service

        async def rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
            task_id = params.get("taskId")
            if not declares_tasks(params) or not lookupable(task_id):
                return NO_SCOPES
            scope = await service.scope_of(task_id, principal.owner)
            return frozenset({scope}) if scope else NO_SCOPES

        async def get_rule(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
            task_id = params.get("taskId")
            if not declares_tasks(params) or not lookupable(task_id):
                return NO_SCOPES
            task = await service.get(task_id, principal.owner)
            _gate_lookup.set(_GateLookup(task_id, principal.owner, task))
            scope = None if task is None else task.scope
            return frozenset({scope}) if scope else NO_SCOPES

        return {**dict.fromkeys(TASK_METHODS, rule), "tasks/get": get_rule}

    def _audit(
        self,
        principal: Principal,
        method: str,
        decision: Decision,
        reason: str,
        *,
        task_id: object = None,
        tool: str | None = None,
    ) -> None:
        """One decision about a task: the trail keeps only a prefix of the id (`task_reference`),
        escaped, since the id is whatever the client sent."""
        reference = task_reference(task_id)
        decided(
            self._record,
            AuditEvent.about(
                principal,
                decision=decision,
                reason=reason,
                method=method,
                target=escaped(reference) if reference is not None else None,
                detail={"tool": tool} if tool else None,
            ),
        )

    def register(self, server: Server[Any]) -> None:
        server.add_request_handler("tasks/get", TaskIdParams, self.get)
        server.add_request_handler("tasks/update", UpdateTaskParams, self.update)
        server.add_request_handler("tasks/cancel", TaskIdParams, self.cancel)

    async def start(
        self,
        tool: ToolSpec,
        arguments: dict[str, Any],
        *,
        principal: Principal,
        client_capabilities: types.ClientCapabilities,
        answers: Mapping[str, Any],
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Create the task; the `CreateTaskResult` is built only from the durably committed record.

        A create repeated with the same idempotency key is answered with the task the first one
        made, in its current state (audited `task_repeated`)."""
        try:
            created = await self._service.create(
                tool,
                arguments,
                principal=principal,
                client_capabilities=client_capabilities.model_dump(
                    by_alias=True, exclude_none=True, mode="json"
                ),
                answers=answers,
                idempotency_key=idempotency_key,
            )
        except MCPError as refused:  # a quota, oversized answers, a reused key or storage: audited
            reason = refused.error.data.get("reason") if isinstance(refused.error.data, dict) else None
            self._audit(principal, "tools/call", Decision.DENY, reason or "invalid_params", tool=tool.name)
            raise
        task = created.task
        reason = "task_repeated" if created.repeated else "task_created"
        self._audit(principal, "tools/call", Decision.ALLOW, reason, task_id=task.task_id, tool=tool.name)
        return create_task_result(task, self._poll_ms)

    def _admit(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> tuple[Principal, str]:
        """Negotiation and routing, before any lookup; returns the caller and the task id."""
        principal = request_principal(ctx)
        method = ctx.method
        if not declares_tasks(declared(ctx)):
            self._audit(principal, method, Decision.DENY, "missing_extension", task_id=params.task_id)
            raise missing_tasks_extension()
        task_id = params.task_id
        if not isinstance(task_id, str) or not task_id:
            self._audit(principal, method, Decision.DENY, "invalid_params")
            raise invalid_params("params.taskId must be a non-empty string")
        headers = ctx.request.headers if ctx.request is not None else {}
        routed = headers.get(MCP_NAME_HEADER)
        # RFC 9110 §5.5: optional whitespace around a field value is not part of it.
        if routed is None or decode_header_value(routed.strip(" \t")) != task_id:
            self._audit(principal, method, Decision.DENY, "routing_mismatch", task_id=task_id)
            raise MCPError(code=HEADER_MISMATCH, message="Mcp-Name header must equal params.taskId")
        if not lookupable(task_id):
            raise self._not_found(principal, method, task_id)
        return principal, task_id

    def _not_found(self, principal: Principal, method: str, task_id: str) -> MCPError:
        self._audit(principal, method, Decision.DENY, "not_found", task_id=task_id)
        return invalid_params(TASK_NOT_FOUND)

    async def get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        principal, task_id = self._admit(ctx, params)
        earlier = _take_gate_lookup(task_id, principal.owner)
        task = earlier.task if earlier is not None else await self._service.get(task_id, principal.owner)
        if task is None:
            raise self._not_found(principal, ctx.method, task_id)
        self._audit(principal, ctx.method, Decision.ALLOW, "ok", task_id=task_id, tool=task.tool)
        return detailed_task(task, self._poll_ms)

    async def update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        principal, task_id = self._admit(ctx, params)
        responses = params.input_responses
        if not isinstance(responses, dict):
            self._audit(principal, ctx.method, Decision.DENY, "invalid_params", task_id=task_id)
            raise invalid_params("params.inputResponses must be an object")
        outcome = await self._service.update(task_id, principal.owner, responses)
        if outcome.verdict is UpdateVerdict.NOT_FOUND:
            raise self._not_found(principal, ctx.method, task_id)
        if outcome.verdict is UpdateVerdict.TOO_LARGE:
            self._audit(principal, ctx.method, Decision.DENY, "too_large", task_id=task_id)
            raise invalid_params(answers_too_large(self._service.max_input_responses_bytes))
        if outcome.verdict is UpdateVerdict.INVALID:
            self._audit(principal, ctx.method, Decision.DENY, "invalid_response", task_id=task_id)
            raise invalid_params(
                f"inputResponses[{outcome.invalid_key!r}] is not a valid response to its input request"
            )
        reason = "answers_accepted" if outcome.accepted else "nothing_outstanding"
        self._audit(principal, ctx.method, Decision.ALLOW, reason, task_id=task_id)
        return ack()

    async def cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        principal, task_id = self._admit(ctx, params)
        verdict = await self._service.cancel(task_id, principal.owner)
        if verdict is CancelVerdict.NOT_FOUND:
            raise self._not_found(principal, ctx.method, task_id)
        reason = "already_terminal" if verdict is CancelVerdict.ALREADY_TERMINAL else "cancel_requested"
        self._audit(principal, ctx.method, Decision.ALLOW, reason, task_id=task_id)
        return ack()
