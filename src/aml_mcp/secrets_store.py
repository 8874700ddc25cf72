"""Server-side secrets: files in the data directory, or a table every replica reads (never tokens:
those are never stored)."""

from __future__ import annotations

import os
import re
import secrets
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg import sql


def write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Owner-only and atomic: a reader sees the old file or the new one, never half of either.

    With `replace=False` an existing file wins (another process created it first), so concurrent
    first starts agree on one secret.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def load_or_create_secret(path: Path, nbytes: int = 32) -> bytes:
    """The secret at `path`, created (owner-only, atomically) on first use.

    Shared by every process that uses the same data directory, so a sealed value minted by one
    replica opens in another.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        write_private(path, secrets.token_bytes(nbytes), replace=False)
        data = path.read_bytes()
    if len(data) < nbytes:
        raise ValueError(f"secret at {path} is shorter than {nbytes} bytes")
    return data


class SecretSource(Protocol):
    """Where a server's own secrets come from: every process of one deployment reads the same ones.

    One laptop keeps them as files in the data directory; replicas sharing a PostgreSQL database
    keep them in a `shared_secrets` table, so a value sealed on one replica opens on any other.
    """

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        """The secret called `name` (at least `nbytes` long), created on first use."""
        ...


class DirectorySecrets:
    """Secrets as owner-only files `<directory>/<name>.key` (the single-host default)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        return load_or_create_secret(self._directory / f"{_checked_name(name)}.key", nbytes)


SECRETS_LOCK = 0x616D6C2D6D637002
"""Advisory lock key held while a secret is created, so concurrent first starts agree on one value."""

_CREATE_TABLE = (
    "CREATE TABLE IF NOT EXISTS shared_secrets ("
    " name TEXT PRIMARY KEY,"
    " value BYTEA NOT NULL,"
    " created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
)


class PostgresSecrets:
    """Secrets in the `shared_secrets` table of a PostgreSQL database (optionally one schema of it).

    Synchronous on purpose: the secrets are read once while the app is built, before any event
    loop runs the pool, and a missing database must stop the start-up rather than leave a server
    that cannot open what its siblings sealed.

    Protection: the table is readable only by the role that owns it (`REVOKE ALL ... FROM PUBLIC`);
    values are never logged. Give the app its own database role and no one else `SELECT` on it.
    """

    def __init__(self, url: str, *, schema: str | None = None, connect_timeout_seconds: int = 5) -> None:
        self._url = url
        self._schema = schema
        self._connect_timeout = connect_timeout_seconds

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        name = _checked_name(name)
        for attempt in range(3):
            try:
                value = self._read_or_create(name, nbytes)
            except psycopg.errors.UniqueViolation:
                # Another process created the schema or table between our check and our create.
                if attempt == 2:
                    raise
                continue
            if len(value) < nbytes:
                raise ValueError(f"shared secret {name!r} is shorter than {nbytes} bytes")
            return value
        raise AssertionError("unreachable")

    def _read_or_create(self, name: str, nbytes: int) -> bytes:
        with (
            psycopg.connect(self._url, autocommit=True, connect_timeout=self._connect_timeout) as conn,
            conn.transaction(),
        ):
            if self._schema is not None:
                conn.execute(sql.SQL("SET LOCAL search_path = {}").format(sql.Identifier(self._schema)))
            row = _fetch(conn, name)
            if row is not None:
                return row
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (SECRETS_LOCK,))
            if self._schema is not None:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self._schema)))
            conn.execute(_CREATE_TABLE)
            conn.execute("REVOKE ALL ON shared_secrets FROM PUBLIC")
            conn.execute(
                "INSERT INTO shared_secrets (name, value) VALUES (%s, %s) ON CONFLICT (name) DO NOTHING",
                (name, secrets.token_bytes(nbytes)),
            )
            created = _fetch(conn, name)
        assert created is not None
        return created


def _fetch(conn: psycopg.Connection[Any], name: str) -> bytes | None:
    """The stored value, or `None` when the secret (or its table) does not exist yet."""
    exists = conn.execute("SELECT to_regclass('shared_secrets') IS NOT NULL").fetchone()
    if exists is None or not exists[0]:
        return None
    row = conn.execute("SELECT value FROM shared_secrets WHERE name = %s", (name,)).fetchone()
    return bytes(row[0]) if row is not None else None


_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def _checked_name(name: str) -> str:
    """Names become file names and keys: lower-case words and dashes, nothing that walks a path."""
    if not _NAME.match(name):
        raise ValueError("a secret name is lower-case letters, digits and dashes")
    return name
