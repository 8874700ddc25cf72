"""Whether a stream may still deliver: re-asked before every event and whenever access changes."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from aml_mcp.principal import Principal


class StreamPolicy(Protocol):
    def denial(self, principal: Principal, needed: frozenset[str]) -> str | None:
        """Why `principal` may no longer receive events that need `needed` scopes; `None` if it still may."""
        ...


class CredentialPolicy:
    """Expiry, revocation and scope, each from the component that owns it.

    `revoked` returns a reason when the credential has been revoked; `missing_scopes` the needed scopes
    the credential no longer grants under the current policy (both supplied by the auth layer).
    With authentication off both are absent and only expiry applies.
    """

    def __init__(
        self,
        *,
        revoked: Callable[[Principal], str | None] | None = None,
        missing_scopes: Callable[[Principal, frozenset[str]], frozenset[str]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._revoked = revoked
        self._missing = missing_scopes
        self._clock = clock

    def denial(self, principal: Principal, needed: frozenset[str]) -> str | None:
        if principal.expires_at is not None and self._clock() >= principal.expires_at:
            return "token_expired"
        if self._revoked is not None and (reason := self._revoked(principal)) is not None:
            return reason
        if self._missing is not None and needed and self._missing(principal, needed):
            return "insufficient_scope"
        return None
