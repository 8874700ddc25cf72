"""How many password attempts the sign-in page accepts, per user and per client address.

The demo accounts have published passwords, but the page is what a real deployment's login page
would be modelled on, and a page that checks any number of guesses a second teaches the wrong
thing. Each attempt counts against two keys: the user it names (only users that exist, so the
keys stay few) and the client address it comes from (which also catches one password tried
against every user). After `max_failures_*` attempts on a key, every further attempt waits for a
backoff that doubles with each failure, up to `backoff_max_seconds`: an attempt inside that
window is refused with 429 and `Retry-After` before the password is even compared, so guessing
right during the backoff does not help. A successful sign-in resets the user's count and does not
count against the address.

The counts live in the issuer's store (`devauth.db`, or the shared database), so every replica
behind a balancer sees the same ones. An attempt is counted in the same transaction that checks
the backoff, before the password is compared: concurrent guesses cannot all slip through the
check at once. Entries are forgotten `memory_seconds` after their last attempt, and at most
`max_entries` are kept (the least recently used go first).

Behind a load balancer the client address is the balancer's (the server trusts no forwarding
header), so the per-address limit then counts every client's attempts together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

USER_KEY = "user:"
ADDRESS_KEY = "address:"


@dataclass(frozen=True, slots=True)
class LoginLimits:
    """The sign-in limiter's policy (see the settings `auth.dev.login_*`)."""

    max_failures_per_user: int = 5
    max_failures_per_address: int = 20
    backoff_base_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    memory_seconds: float = 3_600.0
    max_entries: int = 10_000

    def threshold(self, key: str) -> int:
        """Attempts a key may make before backoff applies."""
        return self.max_failures_per_user if key.startswith(USER_KEY) else self.max_failures_per_address

    def backoff_seconds(self, key: str, failures: int) -> float:
        """How long after its latest attempt a key with `failures` counted attempts must wait."""
        over = failures - self.threshold(key)
        if over < 0:
            return 0.0
        # 2**over grows without bound: cap the exponent before it overflows a float.
        return min(self.backoff_max_seconds, self.backoff_base_seconds * 2.0 ** min(over, 64))

    def wait_seconds(self, key: str, failures: int, last_attempt: float, now: float) -> float:
        """Seconds left before `key` may try again (0: it may). Both stores ask this rule."""
        if self.forgotten(last_attempt, now):
            return 0.0
        return max(0.0, last_attempt + self.backoff_seconds(key, failures) - now)

    def forgotten(self, last_attempt: float, now: float) -> bool:
        """Whether an entry is old enough to start counting afresh (and to be deleted)."""
        return now - last_attempt >= self.memory_seconds


def user_key(username: str) -> str:
    return USER_KEY + username


def address_key(address: str) -> str:
    return ADDRESS_KEY + address


def retry_after(seconds: float) -> int:
    """`Retry-After` for a wait: whole seconds, at least one."""
    return max(1, math.ceil(seconds))
