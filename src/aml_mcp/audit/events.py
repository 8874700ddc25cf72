"""What the audit trail records: one immutable event per security decision.

An event carries the caller's fields, the method and its target, the decision and a short
machine-readable reason — never a token, never tool arguments, never more than a prefix of a task
id. The auth gate and the Tasks handlers both record this one type.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from aml_mcp.principal import Principal

TASK_ID_PREFIX = 8
"""A task id is a handle to someone's work: the trail keeps enough of it to correlate, too little to use."""
_MAX_FIELD = 512


def task_reference(task_id: object) -> str | None:
    """The part of a client-sent task id that may be written to the audit trail."""
    return task_id[:TASK_ID_PREFIX] if isinstance(task_id, str) else None


class Decision(StrEnum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEvent:
    """One decision. Principal fields are `None` when no credential could be verified."""

    decision: Decision
    reason: str
    """Short, stable, machine-readable: `ok`, `no_token`, `bad_signature`, `wrong_audience`, ..."""
    method: str | None = None
    target: str | None = None
    """What the method acts on: a tool or prompt name, a resource URI, a task id."""
    issuer: str | None = None
    subject: str | None = None
    tenant: str | None = None
    client_id: str | None = None
    token_id: str | None = None
    detail: Mapping[str, Any] | None = None
    """Extra structured facts (e.g. the scopes a 403 asked for). Never a credential."""
    time: float = field(default_factory=time.time)

    @classmethod
    def about(
        cls,
        principal: Principal | None,
        *,
        decision: Decision,
        reason: str,
        method: str | None = None,
        target: str | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> AuditEvent:
        """An event whose principal fields come from `principal` (or stay empty)."""
        if principal is None:
            return cls(decision=decision, reason=reason, method=method, target=target, detail=detail)
        return cls(
            decision=decision,
            reason=reason,
            method=method,
            target=target,
            issuer=principal.issuer,
            subject=principal.subject,
            tenant=principal.tenant,
            client_id=principal.client_id,
            token_id=principal.token_id,
            detail=detail,
        )

    def as_record(self) -> dict[str, Any]:
        """The JSON-line / row shape: ISO time, every field present, long values clipped."""
        return {
            "time": datetime.fromtimestamp(self.time, UTC).isoformat(timespec="milliseconds"),
            # (formatted by the sinks' own threads, not on the request path)
            "issuer": _clip(self.issuer),
            "subject": _clip(self.subject),
            "tenant": _clip(self.tenant),
            "client_id": _clip(self.client_id),
            "token_id": _clip(self.token_id),
            "method": _clip(self.method),
            "target": _clip(self.target),
            "decision": self.decision.value,
            "reason": _clip(self.reason),
            "detail": dict(self.detail) if self.detail else None,
        }


def json_line(event: AuditEvent) -> str:
    return json.dumps(event.as_record(), separators=(",", ":"), ensure_ascii=False) + "\n"


def _clip(value: str | None) -> str | None:
    if value is not None and len(value) > _MAX_FIELD:
        return value[:_MAX_FIELD] + "…"
    return value


AuditRecorder = Callable[[AuditEvent], None]
"""Where a component hands its decisions (`AuditLog.record`): must not block, must not raise."""
