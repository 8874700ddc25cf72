"""Where a server's own secrets come from: the `SecretSource` protocol and the rule for their names.

`files.py` keeps each secret as an owner-only file in the data directory (one host); `postgres.py`
keeps them in a table of the database replicas share, so a value sealed on one replica opens on any
other.
"""

from __future__ import annotations

import re
from typing import Protocol


class SecretSource(Protocol):
    """Where a server's own secrets come from: every process of one deployment reads the same ones.

    One laptop keeps them as files in the data directory; replicas sharing a PostgreSQL database
    keep them in a `shared_secrets` table, so a value sealed on one replica opens on any other.
    """

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        """The secret called `name` (at least `nbytes` long), created on first use."""
        ...


_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def checked_name(name: str) -> str:
    """Names become file names and keys: lower-case words and dashes, nothing that walks a path."""
    if not _NAME.match(name):
        raise ValueError("a secret name is lower-case letters, digits and dashes")
    return name


__all__ = ["SecretSource", "checked_name"]
