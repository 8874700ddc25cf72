"""Audit events for the task lifecycle: who asked what about which task, and what they were told.

An event carries the caller's owner fields, the method, a short prefix of the task id (enough to
correlate, too little to use), the decision and a reason code — never argument values, input
responses, results or tokens. Where events go is the composition root's choice (`TaskAudit`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from typing import Literal, Protocol

from aml_mcp.audit import task_reference
from aml_mcp.principal import Principal

Decision = Literal["allow", "deny"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskAuditEvent:
    method: str
    decision: Decision
    reason: str
    issuer: str
    subject: str
    tenant: str
    client_id: str
    task: str | None = None
    """At most a short prefix of the task id (`audit.task_reference`)."""
    tool: str | None = None


def task_event(
    principal: Principal,
    method: str,
    decision: Decision,
    reason: str,
    *,
    task_id: object = None,
    tool: str | None = None,
) -> TaskAuditEvent:
    """An event for `principal`; `task_id` is whatever the caller sent, cut to a short prefix."""
    prefix = task_reference(task_id)
    return TaskAuditEvent(
        method=method,
        decision=decision,
        reason=reason,
        issuer=principal.issuer,
        subject=principal.subject,
        tenant=principal.tenant,
        client_id=principal.client_id,
        task=prefix,
        tool=tool,
    )


class TaskAudit(Protocol):
    def __call__(self, event: TaskAuditEvent) -> None:
        """Record one event; must not block (it runs on the request path)."""


class LoggingTaskAudit:
    """Writes each event as one JSON line to a logger (the default until a dedicated sink is wired)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger("aml_mcp.audit.tasks")

    def __call__(self, event: TaskAuditEvent) -> None:
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info("%s", json.dumps({"kind": "task", **asdict(event)}, separators=(",", ":")))
