"""One audit record per request: the gate's allow, held for a handler that decides the request itself.

The auth gate records the allow of every request it admits (`ok`: the token is good and holds the
scope). The Tasks handlers then decide the same request again, on what the store says (found or not
found, answers taken, cancel requested, already terminal), and record that: without this module one
`tasks/get` left two records, an `allow ok` and the handler's own (for a foreign task even an
`allow ok` beside a `deny not_found`). A `tools/call` of a task tool likewise left the gate's allow
beside the handler's `task_created` (or its refusal: a quota, a reused key). So, for the methods in
`DECIDED_BY_HANDLER`:

- the endpoint opens a `RequestDecision` for each request (`deciding`), in the request's context, so
  the handler (run in a task spawned from it) sees the same one;
- the gate hands its allow to `admitted`, which holds it there instead of writing it;
- the handler's `decided` writes its own record in its place, with what the allow knew that the
  handler does not (the client's trace id);
- a request that never reaches its handler (refused by the protocol layer after admission: a
  version or header mismatch, params that are not an object), or whose handler decides nothing (a
  `tools/call` of a tool that answers at once), still leaves the allow: `deciding` writes what is
  still held when the request ends, whatever way it ends.

Every other method's allow, and every refusal, is written at once, as before; so is everything
recorded outside a request (unit tests, the lab's own routes). Nothing is ever dropped: a held allow
is either replaced by the handler's decision or written itself.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar

from aml_mcp.audit.events import AuditEvent, AuditRecorder, Decision

DECIDED_BY_HANDLER = frozenset({"tasks/get", "tasks/update", "tasks/cancel", "tools/call"})
"""Methods whose handler may record the request's decision itself (`tasks.handlers.TASK_METHODS`, and
`tools/call` for a task tool's create; a test keeps them equal)."""
KEPT_FROM_ADMISSION = ("trace_id",)
"""What the handler's record takes over from the gate's allow it replaces."""


class RequestDecision:
    """The audit record of one request while it is served: an allow held for its handler."""

    def __init__(self, record: AuditRecorder) -> None:
        self._record = record
        self._held: AuditEvent | None = None

    def hold(self, event: AuditEvent) -> None:
        if self._held is not None:  # never expected: one admission per request; keep both
            self._record(self._held)
        self._held = event

    def replace(self, event: AuditEvent) -> AuditEvent:
        """`event` with what the held allow knew; nothing is held any more."""
        held, self._held = self._held, None
        if held is None or held.method != event.method or not held.detail:
            return event
        kept = {key: held.detail[key] for key in KEPT_FROM_ADMISSION if key in held.detail}
        if not kept:
            return event
        return AuditEvent(
            decision=event.decision,
            reason=event.reason,
            method=event.method,
            target=event.target,
            issuer=event.issuer,
            subject=event.subject,
            tenant=event.tenant,
            client_id=event.client_id,
            token_id=event.token_id,
            detail={**kept, **(event.detail or {})},
            time=event.time,
        )

    def close(self) -> None:
        """The request ended: an allow nobody replaced is written as it is."""
        held, self._held = self._held, None
        if held is not None:
            self._record(held)


_current: ContextVar[RequestDecision | None] = ContextVar("aml_mcp_request_decision", default=None)


@contextlib.contextmanager
def deciding(record: AuditRecorder) -> Iterator[RequestDecision]:
    """For the duration of one request: where its allow waits for its handler's decision."""
    decision = RequestDecision(record)
    token = _current.set(decision)
    try:
        yield decision
    finally:
        _current.reset(token)
        decision.close()


def admitted(record: AuditRecorder, event: AuditEvent) -> None:
    """The gate's allow: held for the handler when it decides this request itself, else written."""
    current = _current.get()
    if current is not None and event.decision is Decision.ALLOW and event.method in DECIDED_BY_HANDLER:
        current.hold(event)
    else:
        record(event)


def decided(record: AuditRecorder, event: AuditEvent) -> None:
    """A handler's decision about the request it serves: written in place of the held allow."""
    current = _current.get()
    record(current.replace(event) if current is not None else event)
