"""Where revocations are kept: the `RevocationStore` protocol, its record and the refusals both
backends share.

`RevocationList` keeps the whole list in memory and only needs four things from storage: add,
lift, list, and a cheap fingerprint that changes whenever the list does. `sqlite.py` serves one
host (every process on the data directory); `postgres.py` serves replicas on one database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aml_mcp.store.text import storable

Fingerprint = tuple[int, int]
"""(row count, highest sequence number): differs whenever a row was added or removed."""


@dataclass(frozen=True, slots=True)
class Revocation:
    kind: str
    issuer: str
    value: str
    revoked_at: str
    note: str | None


class InvalidRevocation(ValueError):
    """A revocation no store keeps, refused before anything is sent (on both backends): a kind
    other than `jti` or `subject`, or text holding U+0000 or an unpaired surrogate (PostgreSQL
    `TEXT` cannot hold the one, neither driver can encode the other)."""


KINDS = ("jti", "subject")


def refuse_invalid(kind: str, issuer: str, value: str, note: str | None) -> None:
    """Raise `InvalidRevocation` unless both stores keep this revocation as written."""
    if kind not in KINDS:
        raise InvalidRevocation(f"a revocation is of a {' or a '.join(KINDS)}")
    if not all(storable(text) for text in (issuer, value, note or "")):
        raise InvalidRevocation("a revocation's issuer, value or note holds U+0000 or an unpaired surrogate")


def findable(kind: str, issuer: str, value: str) -> bool:
    """Whether a revocation like this could be stored at all (else lifting it finds none)."""
    return kind in KINDS and storable(issuer) and storable(value)


class RevocationStore(Protocol):
    async def add(
        self, kind: str, issuer: str, value: str, note: str | None, expires_at: float | None = None
    ) -> None:
        """Record a revocation (idempotent: an existing one stays as it was). One with `expires_at`
        (epoch seconds) is deleted after that time, by a later `add`: the list stays bounded."""
        ...

    async def lift(self, kind: str, issuer: str, value: str) -> bool:
        """Remove a revocation; whether there was one."""
        ...

    async def entries(self) -> list[Revocation]:
        """Every revocation, oldest first."""
        ...

    async def fingerprint(self) -> Fingerprint:
        """A cheap value that changes whenever the list does."""
        ...
