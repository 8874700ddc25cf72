"""What the development authorization server remembers: clients, authorization codes, refresh tokens.

Its own small SQLite file (`DATA_DIR/devauth.db`), apart from the server's store: this is not the
production path and must not shape it. Codes and refresh tokens are kept only as SHA-256 digests,
so the file holds nothing a client could present. Calls are synchronous (authlib is) and run on
worker threads; one connection behind a lock is plenty for a development server.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aml_mcp.loopback import is_loopback_host

_SCHEMA = """
CREATE TABLE IF NOT EXISTS clients (
    client_id TEXT PRIMARY KEY,
    secret_sha256 TEXT,
    metadata TEXT NOT NULL,
    issued_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS codes (
    code_sha256 TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    redirect_uri TEXT NOT NULL,
    scope TEXT NOT NULL,
    subject TEXT NOT NULL,
    tenant TEXT NOT NULL,
    resource TEXT NOT NULL,
    code_challenge TEXT NOT NULL,
    code_challenge_method TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS refresh_tokens (
    token_sha256 TEXT PRIMARY KEY,
    client_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    subject TEXT NOT NULL,
    tenant TEXT NOT NULL,
    resource TEXT NOT NULL,
    expires_at REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0
);
"""

CODE_TTL_SECONDS = 300


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _redirect_matches(registered: str, presented: str) -> bool:
    """Exact match, except that a registered loopback URI without a port accepts any port (RFC 8252 §7.3)."""
    if registered == presented:
        return True
    try:
        want, got = urlsplit(registered), urlsplit(presented)
        return (
            want.scheme == got.scheme == "http"
            and want.port is None
            and is_loopback_host(want.hostname)
            and want.hostname == got.hostname
            and want.path == got.path
            and want.query == got.query
            and not got.fragment
        )
    except ValueError:
        return False


@dataclass(frozen=True, slots=True)
class DevClient:
    """A registered client, shaped for authlib's `ClientMixin` protocol."""

    client_id: str
    redirect_uris: tuple[str, ...] = ()
    grant_types: tuple[str, ...] = ("authorization_code", "refresh_token")
    response_types: tuple[str, ...] = ("code",)
    token_endpoint_auth_method: str = "none"  # noqa: S105
    client_name: str | None = None
    tenant: str | None = None
    """For a service client (client credentials): the tenant its tokens speak for."""
    secret_sha256: str | None = field(default=None, repr=False)

    # --- authlib ClientMixin ---
    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return scope or ""

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return any(_redirect_matches(registered, redirect_uri) for registered in self.redirect_uris)

    def check_client_secret(self, client_secret: str) -> bool:
        if self.secret_sha256 is None:
            return False
        return hashlib.sha256(client_secret.encode()).hexdigest() == self.secret_sha256

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        if self.token_endpoint_auth_method == "none":  # noqa: S105
            return method == "none"
        return method in {"client_secret_basic", "client_secret_post"}

    def check_response_type(self, response_type: str) -> bool:
        return response_type in self.response_types

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in self.grant_types

    def to_metadata(self) -> dict[str, Any]:
        return {
            "redirect_uris": list(self.redirect_uris),
            "grant_types": list(self.grant_types),
            "response_types": list(self.response_types),
            "token_endpoint_auth_method": self.token_endpoint_auth_method,
            "client_name": self.client_name,
            "tenant": self.tenant,
        }

    @classmethod
    def from_metadata(
        cls, client_id: str, metadata: Mapping[str, Any], secret_sha256: str | None
    ) -> DevClient:
        return cls(
            client_id=client_id,
            redirect_uris=tuple(metadata.get("redirect_uris") or ()),
            grant_types=tuple(metadata.get("grant_types") or ("authorization_code",)),
            response_types=tuple(metadata.get("response_types") or ("code",)),
            token_endpoint_auth_method=metadata.get("token_endpoint_auth_method") or "none",
            client_name=metadata.get("client_name"),
            tenant=metadata.get("tenant"),
            secret_sha256=secret_sha256,
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """Who a code or refresh token speaks for, and for which resource (RFC 8707) and scopes."""

    client_id: str
    scope: str
    subject: str
    tenant: str
    resource: str

    # authlib reads these off authorization codes and refresh tokens
    def get_scope(self) -> str:
        return self.scope

    def check_client(self, client: DevClient) -> bool:
        return client.client_id == self.client_id


@dataclass(frozen=True, slots=True)
class StoredCode(Grant):
    redirect_uri: str = ""
    code_challenge: str = ""
    code_challenge_method: str = "S256"
    code_sha256: str = ""

    def get_redirect_uri(self) -> str:
        return self.redirect_uri


@dataclass(frozen=True, slots=True)
class StoredRefreshToken(Grant):
    token_sha256: str = ""


class DevStore:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _run(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, tuple(args))

    # --- clients ---
    def put_client(self, client: DevClient, *, replace: bool = True) -> None:
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        self._run(
            f"{verb} INTO clients (client_id, secret_sha256, metadata, issued_at) VALUES (?, ?, ?, ?)",
            (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), time.time()),
        )

    def client(self, client_id: str) -> DevClient | None:
        row = self._run(
            "SELECT secret_sha256, metadata FROM clients WHERE client_id = ?", (client_id,)
        ).fetchone()
        if row is None:
            return None
        return DevClient.from_metadata(client_id, json.loads(row[1]), row[0])

    # --- authorization codes ---
    def put_code(self, code: str, stored: StoredCode) -> None:
        self._run(
            "INSERT INTO codes (code_sha256, client_id, redirect_uri, scope, subject, tenant, resource,"
            " code_challenge, code_challenge_method, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                digest(code),
                stored.client_id,
                stored.redirect_uri,
                stored.scope,
                stored.subject,
                stored.tenant,
                stored.resource,
                stored.code_challenge,
                stored.code_challenge_method,
                time.time() + CODE_TTL_SECONDS,
            ),
        )

    def code(self, code: str, client_id: str) -> StoredCode | None:
        row = self._run(
            "SELECT client_id, scope, subject, tenant, resource, redirect_uri, code_challenge,"
            " code_challenge_method, code_sha256 FROM codes"
            " WHERE code_sha256 = ? AND client_id = ? AND expires_at > ?",
            (digest(code), client_id, time.time()),
        ).fetchone()
        return StoredCode(*row) if row is not None else None

    def delete_code(self, code_sha256: str) -> None:
        self._run("DELETE FROM codes WHERE code_sha256 = ? OR expires_at <= ?", (code_sha256, time.time()))

    # --- refresh tokens ---
    def put_refresh_token(self, token: str, grant: Grant, ttl_seconds: int) -> None:
        self._run(
            "INSERT INTO refresh_tokens (token_sha256, client_id, scope, subject, tenant, resource,"
            " expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                digest(token),
                grant.client_id,
                grant.scope,
                grant.subject,
                grant.tenant,
                grant.resource,
                time.time() + ttl_seconds,
            ),
        )

    def refresh_token(self, token: str) -> StoredRefreshToken | None:
        row = self._run(
            "SELECT client_id, scope, subject, tenant, resource, token_sha256 FROM refresh_tokens"
            " WHERE token_sha256 = ? AND revoked = 0 AND expires_at > ?",
            (digest(token), time.time()),
        ).fetchone()
        return StoredRefreshToken(*row) if row is not None else None

    def revoke_refresh_token(self, token_sha256: str) -> None:
        self._run("UPDATE refresh_tokens SET revoked = 1 WHERE token_sha256 = ?", (token_sha256,))
