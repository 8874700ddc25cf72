"""Revocation: deny by token id (`jti`) or by subject (issuer + subject), checked on every request.

The list lives in a `RevocationStore`, so it survives restarts and is shared by every process of a
deployment (`aml-mcp revoke` writes it while the server runs). Each process keeps the whole list
in memory — a check is two set lookups — and re-reads it when a cheap fingerprint (row count and
highest sequence number) shows a change, every `refresh_seconds`; on PostgreSQL a notification
from the revoking transaction triggers the re-read at once (`refresh` is safe to call any time).
Revocations made through this object take effect in this process at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import anyio

from aml_mcp.auth.storage import Fingerprint, Revocation, RevocationStore
from aml_mcp.listeners import Listeners
from aml_mcp.principal import Principal

logger = logging.getLogger(__name__)

__all__ = ["ANY_ISSUER", "Revocation", "RevocationList"]

ANY_ISSUER = ""


class RevocationList:
    def __init__(self, store: RevocationStore, *, refresh_seconds: float = 2.0) -> None:
        self.store = store
        self.refresh_seconds = refresh_seconds
        self._token_ids: set[tuple[str, str]] = set()
        self._subjects: set[tuple[str, str]] = set()
        self._fingerprint: Fingerprint | None = None
        self._reading = anyio.Lock()
        """One re-read at a time: an older read finishing late never overwrites a newer one."""
        self.changes: Listeners[[]] = Listeners()
        """Told after a refresh found the list changed, so open listen streams re-check at once."""

    def check(self, principal: Principal) -> str | None:
        """The reason `principal`'s credential is revoked (`revoked_token`, `revoked_subject`), or None."""
        if (principal.issuer, principal.subject) in self._subjects:
            return "revoked_subject"
        jti = principal.token_id
        if jti is not None and (
            (principal.issuer, jti) in self._token_ids or (ANY_ISSUER, jti) in self._token_ids
        ):
            return "revoked_token"
        return None

    async def refresh(self) -> None:
        """Re-read the list if it changed since the last read."""
        async with self._reading:
            fingerprint = await self.store.fingerprint()
            if fingerprint == self._fingerprint:
                return
            # Read after the fingerprint: a change in between is loaded now and re-read next time.
            rows = await self.store.entries()
            self._token_ids = {(r.issuer, r.value) for r in rows if r.kind == "jti"}
            self._subjects = {(r.issuer, r.value) for r in rows if r.kind == "subject"}
            first_load = self._fingerprint is None
            self._fingerprint = fingerprint
        if not first_load:
            self.changes.fire()

    @contextlib.asynccontextmanager
    async def watching(self) -> AsyncIterator[None]:
        """Load now, then keep re-reading in the background until the context exits."""
        await self.refresh()

        async def loop() -> None:
            while True:
                await anyio.sleep(self.refresh_seconds)
                try:
                    await self.refresh()
                except Exception:
                    logger.exception("reading the revocation list failed; keeping the previous one")

        async with anyio.create_task_group() as group:
            group.start_soon(loop, name="revocation-refresh")
            try:
                yield
            finally:
                group.cancel_scope.cancel()

    async def _add(
        self, kind: str, issuer: str, value: str, note: str | None, expires_at: float | None = None
    ) -> None:
        if not value:
            raise ValueError("nothing to revoke: empty value")
        await self.store.add(kind, issuer, value, note, expires_at)
        (self._token_ids if kind == "jti" else self._subjects).add((issuer, value))

    async def revoke_token(
        self, jti: str, *, issuer: str | None = None, note: str | None = None, expires_at: float | None = None
    ) -> None:
        """Deny the token with this `jti` (from `issuer`, or from any issuer). With `expires_at`
        (epoch seconds, past the token's expiry and any leeway) the entry is dropped after it."""
        await self._add("jti", issuer or ANY_ISSUER, jti, note, expires_at)

    async def revoke_subject(self, issuer: str, subject: str, *, note: str | None = None) -> None:
        """Deny every token of this subject from this issuer, until lifted."""
        if not issuer:
            raise ValueError("revoking a subject needs its issuer")
        await self._add("subject", issuer, subject, note)

    async def lift(self, kind: str, issuer: str | None, value: str) -> bool:
        """Remove a revocation; returns whether there was one."""
        removed = await self.store.lift(kind, issuer or ANY_ISSUER, value)
        async with self._reading:
            self._fingerprint = None
        await self.refresh()
        return removed

    async def entries(self) -> list[Revocation]:
        return await self.store.entries()
