"""Demo users of the development authorization server: two banks (tenants), different scopes.

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
        "alice", "bank-a", frozenset({"aml:read", "aml:draft"}), "analyst at bank A: search and draft SARs"
    ),
    DemoUser("carol", "bank-a", frozenset({"aml:admin"}), "AML lead at bank A: everything"),
    DemoUser("bob", "bank-b", frozenset({"aml:read"}), "analyst at bank B: search only"),
    DemoUser(
        "dave", "bank-b", frozenset({"aml:read", "aml:eval"}), "model validator at bank B: search, eval"
    ),
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
