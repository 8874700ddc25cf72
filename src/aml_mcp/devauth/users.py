"""Demo users of the development authorization server: two banks (tenants), different scopes.

Their tenants are two of the demo corpus's banks (`aml.demo.TENANTS`), so a fresh `serve` with
its demo data answers them out of the box.

Passwords equal user names and are printed on the login page: these accounts exist to exercise
tenant isolation and step-up consent locally, nothing else.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DemoUser:
    username: str
    tenant: str
    scopes: frozenset[str]
    """What this user may consent to (before the scope hierarchy is applied)."""
    description: str

    def check_password(self, password: str) -> bool:
        return hmac.compare_digest(password.encode(), self.username.encode())


DEMO_USERS: tuple[DemoUser, ...] = (
    DemoUser(
        "alice",
        "meridian-bank",
        frozenset({"aml:read", "aml:draft"}),
        "analyst at Meridian Bank: search and draft SARs",
    ),
    DemoUser("carol", "meridian-bank", frozenset({"aml:admin"}), "AML lead at Meridian Bank: everything"),
    DemoUser("bob", "harbour-trust", frozenset({"aml:read"}), "analyst at Harbour Trust: search only"),
    DemoUser(
        "dave",
        "harbour-trust",
        frozenset({"aml:read", "aml:eval"}),
        "model validator at Harbour Trust: search, eval",
    ),
    DemoUser("erin", "harbour-trust", frozenset({"aml:admin"}), "AML lead at Harbour Trust: everything"),
)


class UserDirectory:
    def __init__(self, users: Iterable[DemoUser] = DEMO_USERS) -> None:
        self._users = {user.username: user for user in users}

    def __iter__(self) -> Iterator[DemoUser]:
        return iter(self._users.values())

    def get(self, username: str) -> DemoUser | None:
        return self._users.get(username)

    def authenticate(self, username: str, password: str) -> DemoUser | None:
        user = self._users.get(username)
        return user if user is not None and user.check_password(password) else None
