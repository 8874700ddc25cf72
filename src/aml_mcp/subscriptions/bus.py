"""The event bus: publishers on one side, open listen streams on the other.

`publish` never blocks the publisher: an in-process bus fans out at once; a cross-process bus
(PostgreSQL LISTEN/NOTIFY) queues the event and sends it from its own task. Listeners are
synchronous, must not block, and are called on the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from aml_mcp.subscriptions.events import Event

logger = logging.getLogger(__name__)

Listener = Callable[[Event], None]


class EventBus(Protocol):
    def publish(self, event: Event) -> None: ...

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Register `listener`; returns an idempotent unsubscribe."""
        ...


class LocalEventBus:
    """In-process fan-out, for the single-process (SQLite) deployment."""

    def __init__(self) -> None:
        self._listeners: dict[object, Listener] = {}

    def publish(self, event: Event) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener(event)
            except Exception:
                logger.exception("event listener raised; continuing")

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        token = object()
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe

    def __len__(self) -> int:
        return len(self._listeners)
