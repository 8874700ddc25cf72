"""Every PostgreSQL advisory lock aml-mcp takes, in one registry.

Advisory locks are one namespace for the whole database: two features that pick the same key wait
on each other for no reason (the demo corpus's first load, a session lock held for up to a minute,
once shared its key with the shared secrets, so creating a secret on a fresh database waited for
another replica's load). So no module writes a key of its own: single-key locks are members of
`AdvisoryLock`, and the first key of a two-key lock (the second is a hash of what it protects, a
bank or a grant family) is a member of `LockClass`. PostgreSQL keeps the one-key and the two-key
spaces apart, so the two enums cannot collide with each other; `unique` keeps each one free of
aliases, and a test checks that no other module names a key.
"""

from __future__ import annotations

from enum import IntEnum, unique


@unique
class AdvisoryLock(IntEnum):
    """Single 64-bit keys (`pg_advisory_xact_lock(key)`, `pg_advisory_lock(key)`)."""

    MIGRATION = 0x616D6C2D6D637001
    """Held while a component's migration step runs, so replicas starting at once apply it once."""
    SECRETS = 0x616D6C2D6D637002
    """Held while a shared secret is created, so every replica ends up with the same one."""
    DEVAUTH_REGISTRATION = 0x616D6C2D6D637003
    """Held while a client registration counts the quota and inserts."""
    DEVAUTH_SIGN_IN = 0x616D6C2D6D637004
    """Held while a sign-in attempt checks its backoff and is counted."""
    NOTES_FIRST_LOAD = 0x616D6C2D6D637005
    """A session lock held for the whole first load of the demo corpus (seconds to a minute)."""


@unique
class LockClass(IntEnum):
    """First keys of two-key locks (`pg_advisory_xact_lock(class, hashtext(name))`): one lock per
    bank, grant family or owner, each class its own space."""

    DEVAUTH_FAMILY = 0x616D6C03
    """A refresh-token grant family: redemption, rotation and revocation of its tokens."""
    BASELINE = 0x616D6C65
    """A bank's evaluation baseline while it is saved."""
    NOTES_MOVE = 0x616D6C6D
    """A bank being re-embedded (one replica moves it; the others wait for the switch)."""
    NOTES_TENANT = 0x616D6C6E
    """Writes to a bank's notes."""
    TASKS_TENANT = 0x616D6C74
    """Task creates of one (issuer, bank), which count the bank's quota before they insert."""


__all__ = ["AdvisoryLock", "LockClass"]
