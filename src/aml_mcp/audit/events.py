"""What the audit trail records: one immutable event per security decision.

An event carries the caller's fields, the method and its target, the decision and a short
machine-readable reason — never a token, never tool arguments, never more than a prefix of a task
id. The auth gate and the Tasks handlers both record this one type.

Several fields come straight from the request (the method, a tool name, a resource URI, a task-id
prefix) or from a credential nobody could verify (`detail.unverified`), so an attacker chooses
them. `as_record` turns every event into something both sinks can always write: strings are
clipped, lone UTF-16 surrogates (which JSON allows and UTF-8 cannot encode) become visible
`\\udXXX` escapes, and `detail` is reduced to plain JSON of bounded depth and size. `json_line`
writes ASCII only, so no raw U+2028/U+2029, C0 or C1 control character reaches a log pipeline or a
terminal. `fallback_record` is what a sink writes instead of an event it still could not store, so
the event leaves a trace rather than taking its neighbours down with it.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from aml_mcp.principal import Principal

TASK_ID_PREFIX = 8
"""A task id is a handle to someone's work: the trail keeps enough of it to correlate, too little to use."""
MAX_FIELD = 512
"""Longest string kept in a column; longer ones end in `…`."""
MAX_DETAIL_STRING = 256
"""Longest string kept inside `detail` (unverified claims are attacker-chosen)."""
MAX_DETAIL_ITEMS = 32
"""Most keys or list items kept per level of `detail`."""
MAX_DETAIL_DEPTH = 4
"""Deepest nesting kept in `detail`; anything deeper becomes `"…"`."""
MAX_DETAIL_CHARS = 2048
"""Longest serialised `detail`; a larger one is kept as a clipped excerpt (`{"clipped": "..."}`)."""
UNRECORDABLE = "unrecordable_event"
"""The reason of the placeholder written for an event a sink could not store (see `fallback_record`)."""


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

    @property
    def anonymous(self) -> bool:
        """No verified principal: the request carried no credential, or one that was refused."""
        return self.subject is None and self.issuer is None and self.tenant is None

    def as_record(self) -> dict[str, Any]:
        """The JSON-line / row shape: ISO time, every field present, every value safe to write.

        Formatted by the sinks on the audit flusher thread, never on the request path.
        """
        return {
            "time": iso_time(self.time),
            "issuer": _text(self.issuer),
            "subject": _text(self.subject),
            "tenant": _text(self.tenant),
            "client_id": _text(self.client_id),
            "token_id": _text(self.token_id),
            "method": _text(self.method),
            "target": _text(self.target),
            "decision": _decision(self.decision),
            "reason": _text(self.reason) or "",
            "detail": plain_detail(self.detail),
        }


def iso_time(seconds: float) -> str:
    """UTC ISO 8601 with milliseconds (what both sinks store); an impossible time becomes the epoch."""
    try:
        return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")
    except (OverflowError, OSError, ValueError, TypeError):
        return datetime.fromtimestamp(0, UTC).isoformat(timespec="milliseconds")


def json_line(event: AuditEvent) -> str:
    """One event as one line of ASCII JSON (`\\u2028`, C0 and C1 controls are escaped, never raw)."""
    return dumps(event.as_record()) + "\n"


def dumps(record: Mapping[str, Any]) -> str:
    """Compact ASCII JSON: the one encoding of a record for files, logs and the terminal."""
    return json.dumps(record, separators=(",", ":"), ensure_ascii=True)


def fallback_record(event: object, error: BaseException) -> dict[str, Any]:
    """A record that can always be written, standing in for `event`, which could not be.

    Keeps when it happened, the decision and who and what it was about — every string reduced to
    ASCII with backslash escapes — and says why the original was not stored.
    """
    values = {name: getattr(event, name, None) for name in _FIELDS}
    stamp = values["time"]
    return {
        "time": iso_time(stamp if isinstance(stamp, int | float) else 0.0),
        **{name: _ascii(values[name]) for name in _TEXT_FIELDS},
        "decision": _decision(values["decision"]),
        "reason": UNRECORDABLE,
        "detail": {"error": type(error).__name__, "reason": _ascii(values["reason"])},
    }


_TEXT_FIELDS = ("issuer", "subject", "tenant", "client_id", "token_id", "method", "target")
_FIELDS = (*_TEXT_FIELDS, "time", "decision", "reason")


def _decision(value: object) -> str:
    return value.value if isinstance(value, Decision) else _ascii(value) or "unknown"


def _text(value: object, limit: int = MAX_FIELD) -> str | None:
    """A string every sink can encode: clipped, and lone surrogates turned into `\\udXXX` text."""
    if value is None:
        return None
    if isinstance(value, str):
        text = value
    else:
        try:
            text = str(value)
        except Exception:
            return f"<unprintable {type(value).__name__}>"
    if len(text) > limit:
        text = text[:limit] + "…"
    if not text.isascii():
        # Lone surrogates are the only code points UTF-8 (and so SQLite and the file) refuses.
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _ascii(value: object) -> str | None:
    """Last-resort form of a value for `fallback_record`: ASCII with backslash escapes, clipped."""
    if value is None:
        return None
    try:
        text = value if isinstance(value, str) else str(value)
        return text[:MAX_FIELD].encode("ascii", "backslashreplace").decode("ascii")
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def plain_detail(detail: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`detail` as plain JSON values of bounded depth, width and size (None when empty)."""
    if not detail:
        return None
    plain = _plain(detail, 0)
    if not isinstance(plain, dict) or not plain:
        return None
    encoded = dumps(plain)
    if len(encoded) > MAX_DETAIL_CHARS:
        return {"clipped": encoded[: MAX_DETAIL_CHARS - 64] + "…"}
    return plain


def _plain(value: object, depth: int) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -_INT_RANGE <= value <= _INT_RANGE else "<integer out of range>"
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # strict JSON has no NaN or Infinity
    if isinstance(value, str):
        return _text(value, MAX_DETAIL_STRING)
    if depth >= MAX_DETAIL_DEPTH:
        return "…"
    if isinstance(value, Mapping):
        items = list(value.items())[:MAX_DETAIL_ITEMS]
        return {_text(key, 64) or "": _plain(item, depth + 1) for key, item in items}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(item, depth + 1) for item in list(value)[:MAX_DETAIL_ITEMS]]
    try:
        shown = repr(value)
    except Exception:
        shown = f"<unprintable {type(value).__name__}>"
    return _text(shown, MAX_DETAIL_STRING)


_INT_RANGE = 2**63


AuditRecorder = Callable[[AuditEvent], None]
"""Where a component hands its decisions (`AuditLog.record`): must not block, must not raise."""
