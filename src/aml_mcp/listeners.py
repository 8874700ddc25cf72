"""Change listeners shared by the registries, so list-changed notifications have one source."""

from __future__ import annotations

import logging
from collections.abc import Callable

logger = logging.getLogger(__name__)


class ChangeListeners:
    """Synchronous callbacks run after a registry changes; one failing listener never stops the rest."""

    def __init__(self) -> None:
        self._listeners: dict[object, Callable[[], None]] = {}

    def add(self, listener: Callable[[], None]) -> Callable[[], None]:
        token = object()
        self._listeners[token] = listener

        def remove() -> None:
            self._listeners.pop(token, None)

        return remove

    def fire(self) -> None:
        for listener in list(self._listeners.values()):
            try:
                listener()
            except Exception:
                logger.exception("registry change listener raised")
