"""The event bus: publishers on one side, open listen streams on the other.

`publish` never blocks the publisher: an in-process bus fans out at once; a cross-process bus
(PostgreSQL LISTEN/NOTIFY) queues the event and sends it from its own task. Listeners are
synchronous, must not block, and are called on the event loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from aml_mcp.listeners import Listeners
from aml_mcp.subscriptions.events import Event

Listener = Callable[[Event], None]


class EventBus(Protocol):
    def publish(self, event: Event) -> None: ...

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Register `listener`; returns an idempotent unsubscribe."""
        ...


class LocalEventBus:
    """In-process fan-out, for the single-process (SQLite) deployment."""

    def __init__(self) -> None:
        self._listeners: Listeners[[Event]] = Listeners()

    def publish(self, event: Event) -> None:
        self._listeners.fire(event)

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        return self._listeners.add(listener)

    def __len__(self) -> int:
        return len(self._listeners)
