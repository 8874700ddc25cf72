"""What the development authorization server remembers: clients, authorization codes, refresh tokens.

Its own small SQLite file (`DATA_DIR/devauth.db`), apart from the server's store: this is not the
production path and must not shape it. Codes and refresh tokens are kept only as SHA-256 digests,
so the file holds nothing a client could present. Calls are synchronous (authlib is) and run on
worker threads; one connection behind a lock is plenty for a development server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aml_mcp.devauth.redirects import loopback_redirect, redirect_matches

logger = logging.getLogger(__name__)

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

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: grant families (replay revokes every token descended from one authorization), single-use
    # codes remembered after use, and which clients registered themselves (for the quota).
    (
        "ALTER TABLE codes ADD COLUMN family TEXT",
        "ALTER TABLE codes ADD COLUMN used INTEGER NOT NULL DEFAULT 0",
        "UPDATE codes SET family = code_sha256 WHERE family IS NULL",
        "ALTER TABLE refresh_tokens ADD COLUMN family TEXT",
        "UPDATE refresh_tokens SET family = token_sha256 WHERE family IS NULL",
        "CREATE INDEX refresh_tokens_by_family ON refresh_tokens (family)",
        "CREATE TABLE revoked_families"
        " (family TEXT PRIMARY KEY, revoked_at REAL NOT NULL, reason TEXT NOT NULL)",
        "ALTER TABLE clients ADD COLUMN registered INTEGER NOT NULL DEFAULT 0",
        "CREATE INDEX clients_by_registration ON clients (registered, issued_at)",
    ),
)
"""Schema changes after the first layout, applied in order and counted in `PRAGMA user_version`."""

CODE_TTL_SECONDS = 300
REGISTRATION_WINDOW_SECONDS = 60.0


def digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def new_family() -> str:
    """A fresh grant family id: one per user authorization, inherited by every refresh token from it."""
    return secrets.token_urlsafe(16)


class RegistrationRefused(Exception):
    """Dynamic registration is over its quota: `total` (too many clients) or `rate` (too many lately)."""

    def __init__(self, kind: str, limit: int, retry_after: int | None = None) -> None:
        super().__init__(kind)
        self.kind = kind
        self.limit = limit
        self.retry_after = retry_after


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
    any_loopback_redirect: bool = False
    """A native application on the user's machine (RFC 8252 §7.3, §8.3): besides `redirect_uris`,
    any `http` loopback redirect URI, whatever its port and path. Never set by dynamic registration."""

    # --- authlib ClientMixin ---
    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str | None:
        return self.redirect_uris[0] if len(self.redirect_uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return scope or ""

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        if self.any_loopback_redirect and loopback_redirect(redirect_uri) is not None:
            return True
        return any(redirect_matches(registered, redirect_uri) for registered in self.redirect_uris)

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
            "any_loopback_redirect": self.any_loopback_redirect,
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
            any_loopback_redirect=metadata.get("any_loopback_redirect") is True,
        )


@dataclass(frozen=True, slots=True)
class Grant:
    """Who a code or refresh token speaks for, and for which resource (RFC 8707) and scopes.

    `family` ties every refresh token to the authorization it descends from, so a replay of any
    of them can revoke them all (RFC 9700 §4.14.2); empty for grants without refresh tokens.
    """

    client_id: str
    scope: str
    subject: str
    tenant: str
    resource: str
    family: str = ""

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
    """Clients, codes and refresh tokens in `devauth.db`.

    Every decision that must hold under concurrent requests is one transaction: redeeming a code
    or a refresh token is a conditional `UPDATE ... RETURNING` that succeeds for exactly one caller,
    and a registration counts the quota and inserts in the same transaction. Codes and refresh
    tokens that were already used are remembered (as digests) for `replay_memory_seconds`, so a
    replay is recognised and revokes its whole grant family.
    """

    def __init__(self, path: Path, *, replay_memory_seconds: float = 86_400.0) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.replay_memory_seconds = replay_memory_seconds
        self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._lock = threading.Lock()
        self._conn.executescript(_SCHEMA)
        self._migrate()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def _run(self, sql: str, args: Iterable[Any] = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._conn.execute(sql, tuple(args))

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (`BEGIN IMMEDIATE`) so its reads cannot go stale."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self._transaction() as conn:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            for number, statements in enumerate(_MIGRATIONS[version:], start=version + 1):
                for statement in statements:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {number}")

    # --- clients ---
    def put_client(self, client: DevClient, *, replace: bool = True) -> None:
        """Store a pre-registered client (not counted against the registration quota)."""
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        self._run(
            f"{verb} INTO clients (client_id, secret_sha256, metadata, issued_at) VALUES (?, ?, ?, ?)",
            (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), time.time()),
        )

    def register_client(self, client: DevClient, *, max_total: int, max_per_minute: int) -> None:
        """Store a dynamically registered client, within the quota, or raise `RegistrationRefused`."""
        now = time.time()
        with self._transaction() as conn:
            total = conn.execute("SELECT COUNT(*) FROM clients WHERE registered = 1").fetchone()[0]
            if total >= max_total:
                raise RegistrationRefused("total", max_total)
            recent = [
                issued_at
                for (issued_at,) in conn.execute(
                    "SELECT issued_at FROM clients WHERE registered = 1 AND issued_at > ?"
                    " ORDER BY issued_at DESC LIMIT ?",
                    (now - REGISTRATION_WINDOW_SECONDS, max_per_minute),
                )
            ]
            if len(recent) >= max_per_minute:
                retry_after = max(1, math.ceil(recent[-1] + REGISTRATION_WINDOW_SECONDS - now))
                raise RegistrationRefused("rate", max_per_minute, retry_after)
            conn.execute(
                "INSERT INTO clients (client_id, secret_sha256, metadata, issued_at, registered)"
                " VALUES (?, ?, ?, ?, 1)",
                (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), now),
            )

    def client(self, client_id: str) -> DevClient | None:
        row = self._run(
            "SELECT secret_sha256, metadata FROM clients WHERE client_id = ?", (client_id,)
        ).fetchone()
        if row is None:
            return None
        return DevClient.from_metadata(client_id, json.loads(row[1]), row[0])

    # --- grant families ---
    def _revoke_family(
        self, conn: sqlite3.Connection, family: str | None, client_id: str, reason: str
    ) -> None:
        """Inside a transaction: every refresh token and code of `family` stops working, for good."""
        if not family:
            return
        conn.execute(
            "INSERT OR IGNORE INTO revoked_families (family, revoked_at, reason) VALUES (?, ?, ?)",
            (family, time.time(), reason),
        )
        conn.execute("UPDATE refresh_tokens SET revoked = 1 WHERE family = ?", (family,))
        conn.execute("UPDATE codes SET used = 1 WHERE family = ?", (family,))
        logger.warning("%s: revoked every refresh token of that grant (client %s)", reason, client_id)

    def _forget_old(self, conn: sqlite3.Connection, now: float) -> None:
        horizon = now - self.replay_memory_seconds
        conn.execute(
            "DELETE FROM codes WHERE (used = 0 AND expires_at <= ?) OR expires_at <= ?", (now, horizon)
        )
        conn.execute("DELETE FROM refresh_tokens WHERE expires_at <= ?", (now,))
        conn.execute("DELETE FROM revoked_families WHERE revoked_at <= ?", (horizon,))

    # --- authorization codes ---
    def put_code(self, code: str, stored: StoredCode) -> None:
        now = time.time()
        with self._transaction() as conn:
            self._forget_old(conn, now)
            conn.execute(
                "INSERT INTO codes (code_sha256, client_id, redirect_uri, scope, subject, tenant, resource,"
                " code_challenge, code_challenge_method, expires_at, family)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
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
                    now + CODE_TTL_SECONDS,
                    stored.family or new_family(),
                ),
            )

    def code(self, code: str, client_id: str) -> StoredCode | None:
        """An unused, unexpired code issued to `client_id`. A code presented again after it was
        redeemed is a replay (RFC 6749 §4.1.2): its grant family is revoked, and the answer is None."""
        code_sha256 = digest(code)
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT client_id, scope, subject, tenant, resource, family, redirect_uri, code_challenge,"
                " code_challenge_method, used, expires_at FROM codes WHERE code_sha256 = ?",
                (code_sha256,),
            ).fetchone()
            if row is None:
                return None
            if row[9]:
                self._revoke_family(conn, row[5], row[0], "authorization code replayed")
                return None
        if row[0] != client_id or row[10] <= time.time():
            return None
        return StoredCode(
            client_id=row[0],
            scope=row[1],
            subject=row[2],
            tenant=row[3],
            resource=row[4],
            family=row[5] or code_sha256,
            redirect_uri=row[6],
            code_challenge=row[7],
            code_challenge_method=row[8],
            code_sha256=code_sha256,
        )

    def redeem_code(self, code_sha256: str) -> bool:
        """Mark a code used: True for exactly one caller, however many redeem it at once. A caller
        that finds it already used is replaying it, and revokes its grant family."""
        with self._transaction() as conn:
            redeemed = conn.execute(
                "UPDATE codes SET used = 1 WHERE code_sha256 = ? AND used = 0 AND expires_at > ? RETURNING 1",
                (code_sha256, time.time()),
            ).fetchall()
            if redeemed:
                return True
            row = conn.execute(
                "SELECT family, client_id FROM codes WHERE code_sha256 = ? AND used = 1", (code_sha256,)
            ).fetchone()
            if row is not None:
                self._revoke_family(conn, row[0], row[1], "authorization code redeemed twice")
            return False

    # --- refresh tokens ---
    def put_refresh_token(self, token: str, grant: Grant, ttl_seconds: int) -> bool:
        """Store a new refresh token of `grant.family`. It is born revoked (and False is returned)
        if its family was revoked meanwhile, so a replay racing a rotation cannot fork the family."""
        now = time.time()
        family = grant.family or new_family()
        with self._transaction() as conn:
            self._forget_old(conn, now)
            ((revoked,),) = conn.execute(
                "INSERT INTO refresh_tokens (token_sha256, client_id, scope, subject, tenant, resource,"
                " expires_at, family, revoked) VALUES (?, ?, ?, ?, ?, ?, ?, ?,"
                " EXISTS (SELECT 1 FROM revoked_families WHERE family = ?)) RETURNING revoked",
                (
                    digest(token),
                    grant.client_id,
                    grant.scope,
                    grant.subject,
                    grant.tenant,
                    grant.resource,
                    now + ttl_seconds,
                    family,
                    family,
                ),
            ).fetchall()
        return not revoked

    def refresh_token(self, token: str) -> StoredRefreshToken | None:
        """A live refresh token. One presented after it was rotated out (or revoked) is a reuse
        (RFC 9700 §4.14.2): its whole family is revoked, and the answer is None."""
        token_sha256 = digest(token)
        with self._transaction() as conn:
            row = conn.execute(
                "SELECT client_id, scope, subject, tenant, resource, family, revoked, expires_at"
                " FROM refresh_tokens WHERE token_sha256 = ?",
                (token_sha256,),
            ).fetchone()
            if row is None:
                return None
            if row[6]:
                self._revoke_family(conn, row[5], row[0], "refresh token reused")
                return None
        if row[7] <= time.time():
            return None
        return StoredRefreshToken(
            client_id=row[0],
            scope=row[1],
            subject=row[2],
            tenant=row[3],
            resource=row[4],
            family=row[5] or token_sha256,
            token_sha256=token_sha256,
        )

    def redeem_refresh_token(self, token_sha256: str) -> bool:
        """Rotate a refresh token out: True for exactly one caller. A caller that finds it already
        rotated out is reusing it, and revokes its family."""
        with self._transaction() as conn:
            redeemed = conn.execute(
                "UPDATE refresh_tokens SET revoked = 1 WHERE token_sha256 = ? AND revoked = 0"
                " AND expires_at > ? RETURNING 1",
                (token_sha256, time.time()),
            ).fetchall()
            if redeemed:
                return True
            row = conn.execute(
                "SELECT family, client_id FROM refresh_tokens WHERE token_sha256 = ? AND revoked = 1",
                (token_sha256,),
            ).fetchone()
            if row is not None:
                self._revoke_family(conn, row[0], row[1], "refresh token redeemed twice")
            return False
