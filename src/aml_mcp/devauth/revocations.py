"""Access tokens of a revoked grant family are refused by the resource server at once.

A replayed authorization code or refresh token revokes its grant family in the issuer's store
(`DevAuthStore`): its codes and refresh tokens stop working there. The access tokens already
minted from the family are JWTs the resource server verifies on its own, so revoking them means
telling the resource server's revocation list (`aml_mcp.auth.revocation.RevocationList`), which is
shared by every process and, on PostgreSQL, notified to every replica as soon as it commits.

The issuer remembers each access token it mints for a family (its `jti`, until it expires plus the
verifier's leeway), and the transaction that revokes a family marks them revoked: an outbox in the
issuer's own store, so nothing is lost if this process stops between the two writes. The outbox is
emptied into the revocation list by `publish()`: after every token request (before the answer is
sent, so the client that provoked a revocation gets its 400 only once the tokens are refused) and
every `interval_seconds` in the background (for a process that stopped before publishing, or a
revocation list that could not be written). Publishing twice is harmless: a revocation is
idempotent.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from aml_mcp.auth.revocation import RevocationList
from aml_mcp.devauth.storage import DevAuthStore

logger = logging.getLogger(__name__)

NOTE = "grant family revoked after a replayed code or refresh token"
"""The note of these revocations in `aml-mcp revoke --list`."""

CLOCK_SLACK_SECONDS = 60
"""Kept this much longer than a token's expiry plus leeway: the issuer's and verifiers' clocks may differ."""


class FamilyRevocations:
    """The outbox from the issuer's store to the resource server's revocation list."""

    def __init__(
        self, store: DevAuthStore, *, issuer: str, interval_seconds: float = 2.0, batch: int = 200
    ) -> None:
        self.store = store
        self.issuer = issuer
        self.interval_seconds = interval_seconds
        self.batch = batch
        self._revocations: RevocationList | None = None
        self._publishing = anyio.Lock()

    def into(self, revocations: RevocationList) -> None:
        """Where revoked access tokens go: the resource server's list (built after the issuer, which
        it trusts, so it is handed over once both exist)."""
        self._revocations = revocations

    async def publish(self) -> int:
        """Hand every pending revoked access token to the revocation list; how many were handed.

        Raises what the stores raise (the caller answers 503: a token that should be refused
        must not be handed out while its revocation cannot be recorded)."""
        revocations = self._revocations
        if revocations is None:
            return 0
        handed = 0
        async with self._publishing:
            while True:
                pending = await anyio.to_thread.run_sync(self.store.revoked_access_tokens, self.batch)
                for token in pending:
                    await revocations.revoke_token(
                        token.jti, issuer=self.issuer, note=NOTE, expires_at=token.keep_until
                    )
                if pending:
                    await anyio.to_thread.run_sync(
                        self.store.forget_access_tokens, [token.jti for token in pending]
                    )
                handed += len(pending)
                if len(pending) < self.batch:
                    return handed

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Publish every `interval_seconds` in the background until the context exits."""

        async def loop() -> None:
            while True:
                await anyio.sleep(self.interval_seconds)
                try:
                    await self.publish()
                except Exception:
                    logger.warning(
                        "could not hand revoked access tokens to the revocation list; retrying",
                        exc_info=True,
                    )

        async with anyio.create_task_group() as group:
            group.start_soon(loop, name="devauth-family-revocations")
            try:
                yield
            finally:
                group.cancel_scope.cancel()
