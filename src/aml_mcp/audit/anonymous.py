"""Anonymous refusals, counted instead of written one by one once they repeat.

Anyone who can reach the server can make it refuse a request: without this, every such refusal
is one row in the store and one line in the file, and a single client sending junk as fast as it
can grows the disk by gigabytes an hour. What a refusal of nobody-in-particular tells an
investigator is *that* it happened, how often and when, so:

- the first anonymous refusal of a kind (same reason, method and target) in a window is written
  as is, immediately;
- the identical ones that follow within `window_seconds` of it are only counted, and written as
  one summary when the window closes: the same reason, method and target, with
  `detail.aggregated = {"count": n, "first": time, "last": time}` (`time` is the first one's);
- at most `max_distinct` kinds are tracked at once, so varying the tool name or URI of each
  request does not escape the limit: refusals of further kinds fold into one summary per reason
  (no method or target, `detail.aggregated.distinct` = how many kinds were folded, counted up to
  10,000).

So whatever an anonymous client sends, it adds at most about `2 x max_distinct` records per
window, and the counts of the records add up to the number of refusals. Every allowed call, and
every refusal of a verified principal, is written on its own: those are never aggregated. This
runs on the audit flusher thread, never on the request path.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aml_mcp.audit.events import AuditEvent, Decision, iso_time

DEFAULT_WINDOW_SECONDS = 1.0
DEFAULT_MAX_DISTINCT = 32

_MAX_KINDS_COUNTED = 10_000
"""Beyond this many kinds in one overflow window, `distinct` stops growing (it is then a lower bound)."""

_Key = tuple[str, str | None, str | None]


@dataclass(slots=True)
class _Window:
    opened: float
    """When the window's first refusal happened (it closes `window_seconds` later)."""
    template: AuditEvent
    """What a summary repeats: the reason, and for one kind its method and target."""
    count: int = 0
    first: float = 0.0
    last: float = 0.0
    kinds: set[_Key] = field(default_factory=set)


class AnonymousRefusals:
    """Folds repeated anonymous refusals into counted summaries (see the module docstring)."""

    def __init__(
        self, *, window_seconds: float = DEFAULT_WINDOW_SECONDS, max_distinct: int = DEFAULT_MAX_DISTINCT
    ) -> None:
        self.window_seconds = window_seconds
        self.max_distinct = max_distinct
        self._windows: dict[_Key, _Window] = {}
        self._overflow: dict[str, _Window] = {}
        self.folded = 0
        """Refusals counted into a summary instead of written on their own (since start)."""

    @property
    def enabled(self) -> bool:
        return self.window_seconds > 0

    def take(self, events: Iterable[AuditEvent], now: float) -> list[AuditEvent]:
        """What to write of `events` (in order), followed by the summaries of windows closed by `now`."""
        out: list[AuditEvent] = []
        for event in events:
            if not self.enabled or event.decision is not Decision.DENY or not event.anonymous:
                out.append(event)
                continue
            passed = self._fold(event, out)
            if passed is not None:
                out.append(passed)
        out.extend(self._close(now))
        return out

    def drain(self) -> list[AuditEvent]:
        """Every pending summary, whatever its window (when the log closes)."""
        return self._close(float("inf"))

    def _fold(self, event: AuditEvent, out: list[AuditEvent]) -> AuditEvent | None:
        key: _Key = (event.reason, event.method, event.target)
        window = self._windows.get(key)
        if window is not None and event.time >= window.opened + self.window_seconds:
            del self._windows[key]
            out.extend(_summary(window))
            window = None
        if window is not None:
            _count(window, event)
            self.folded += 1
            return None
        if len(self._windows) < self.max_distinct:
            self._windows[key] = _Window(opened=event.time, template=event)
            return event
        overflow = self._overflow.get(event.reason)
        if overflow is not None and event.time >= overflow.opened + self.window_seconds:
            del self._overflow[event.reason]
            out.extend(_summary(overflow))
            overflow = None
        if overflow is None:
            overflow = self._overflow[event.reason] = _Window(
                opened=event.time, template=AuditEvent(decision=Decision.DENY, reason=event.reason)
            )
        _count(overflow, event)
        if len(overflow.kinds) < _MAX_KINDS_COUNTED:
            overflow.kinds.add(key)
        self.folded += 1
        return None

    def _close(self, now: float) -> list[AuditEvent]:
        closed: list[AuditEvent] = []
        for key, window in list(self._windows.items()):
            if now >= window.opened + self.window_seconds:
                del self._windows[key]
                closed.extend(_summary(window))
        for reason, window in list(self._overflow.items()):
            if now >= window.opened + self.window_seconds:
                del self._overflow[reason]
                closed.extend(_summary(window))
        return closed


def _count(window: _Window, event: AuditEvent) -> None:
    if window.count == 0:
        window.first = event.time
    window.count += 1
    window.last = event.time


def _summary(window: _Window) -> list[AuditEvent]:
    if window.count == 0:
        return []
    aggregated: dict[str, object] = {
        "count": window.count,
        "first": iso_time(window.first),
        "last": iso_time(window.last),
    }
    if window.kinds:
        aggregated["distinct"] = len(window.kinds)
    template = window.template
    return [
        AuditEvent(
            decision=Decision.DENY,
            reason=template.reason,
            method=None if window.kinds else template.method,
            target=None if window.kinds else template.target,
            detail={"aggregated": aggregated},
            time=window.first,
        )
    ]
