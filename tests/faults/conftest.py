"""The fault tests' database: a PostgreSQL server of their own, one per module (see
`tests/support/private_postgres.py`), which they may break as they like."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.private_postgres import PrivatePostgres


@pytest.fixture(scope="module")
def private_postgres() -> Iterator[PrivatePostgres]:
    with PrivatePostgres() as server:
        yield server
