"""Listeners: synchronous callbacks that one thing calls when it changes, and nothing more.

The registries (list-changed), the revocation list (access changed) and the in-process event bus
all fan out the same way, so they share this one primitive: listeners are kept by token (adding
the same function twice registers it twice), each call is isolated (one failing listener never
stops the rest), and the returned function removes exactly the registration it came from.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic, ParamSpec

logger = logging.getLogger(__name__)

P = ParamSpec("P")


class Listeners(Generic[P]):
    """Callbacks taking `P`; `fire(*args)` calls each, in registration order."""

    def __init__(self) -> None:
        self._listeners: dict[object, Callable[P, None]] = {}

    def add(self, listener: Callable[P, None]) -> Callable[[], None]:
        """Register `listener`; returns an idempotent remove."""
        token = object()
        self._listeners[token] = listener

        def remove() -> None:
            self._listeners.pop(token, None)

        return remove

    def fire(self, *args: P.args, **kwargs: P.kwargs) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener(*args, **kwargs)
            except Exception:
                logger.exception("a listener raised; the others still run")

    def __len__(self) -> int:
        return len(self._listeners)
