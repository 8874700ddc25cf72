"""Logging a storage outage once when it starts and once when it ends, never once per failed call.

While a database is away every request, heartbeat and claim fails the same way; a line for each
would bury the one fact an operator needs (when it went, why, when it came back). Stores of both
backends and the task runner share this one rule. Keys let one log follow several independent
jobs (each heartbeat, each claim loop), which fail and recover separately.
"""

from __future__ import annotations

import logging


class OutageLog:
    """`failed` logs the first failure of an outage (per key), `recovered` its end."""

    def __init__(self, logger: logging.Logger, *, down: str, up: str) -> None:
        """`down` and `up` are messages with `{what}` and `{cause}` (for `up`: the outage's last
        cause), and `down` also `{error}`."""
        self._logger = logger
        self._down_message = down
        self._up_message = up
        self._down: dict[str, str] = {}

    def failed(self, cause: str, error: object = "", *, what: str = "") -> None:
        if what not in self._down:
            self._logger.warning(self._down_message.format(what=what, cause=cause, error=error))
        self._down[what] = cause

    def recovered(self, *, what: str = "") -> None:
        cause = self._down.pop(what, None)
        if cause is not None:
            self._logger.info(self._up_message.format(what=what, cause=cause))

    def cause(self, *, what: str = "") -> str | None:
        """Why `what` is down now (`None`: it is not)."""
        return self._down.get(what)


__all__ = ["OutageLog"]
