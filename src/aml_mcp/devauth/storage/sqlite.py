"""The development authorization server's state in a SQLite file, for one host: `SqliteDevAuthStore`.

Clients, codes, refresh and access tokens and the sign-in limiter's counts live in its own small
file (`DATA_DIR/devauth.db`), apart from the server's store: this is not the production path and
must not shape it. Codes and refresh tokens are kept only as SHA-256 digests, so the file holds
nothing a client could present. Calls are synchronous (authlib is) and run on worker threads; one
connection behind a lock is plenty for a development server.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from aml_mcp.devauth.login_limits import LoginLimits
from aml_mcp.devauth.storage import (
    CODE_TTL_SECONDS,
    REGISTRATION_WINDOW_SECONDS,
    DevClient,
    Grant,
    RevokedAccessToken,
    StoredCode,
    StoredRefreshToken,
    check_registration_quota,
    checked,
    digest,
    new_family,
)
from aml_mcp.store.text import storable

__all__ = ["SqliteDevAuthStore"]

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
    # 2: the access tokens minted for each grant family while they live (a replay revokes them
    # too; `revoked` rows are the outbox to the resource server's revocation list), and the
    # sign-in limiter's counts.
    (
        "CREATE TABLE access_tokens (jti TEXT PRIMARY KEY, family TEXT NOT NULL,"
        " keep_until REAL NOT NULL, revoked INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX access_tokens_by_family ON access_tokens (family)",
        "CREATE INDEX access_tokens_revoked ON access_tokens (keep_until) WHERE revoked = 1",
        "CREATE TABLE login_attempts"
        " (key TEXT PRIMARY KEY, failures INTEGER NOT NULL, last_attempt REAL NOT NULL)",
        "CREATE INDEX login_attempts_by_time ON login_attempts (last_attempt)",
    ),
)
"""Schema changes after the first layout, applied in order and counted in `PRAGMA user_version`."""


class SqliteDevAuthStore:
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
        checked(client.client_id, client.secret_sha256)
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        self._run(
            f"{verb} INTO clients (client_id, secret_sha256, metadata, issued_at) VALUES (?, ?, ?, ?)",
            (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), time.time()),
        )

    def register_client(self, client: DevClient, *, max_total: int, max_per_minute: int) -> None:
        """Store a dynamically registered client, within the quota, or raise `RegistrationRefused`."""
        checked(client.client_id, client.secret_sha256)
        now = time.time()
        with self._transaction() as conn:
            total = conn.execute("SELECT COUNT(*) FROM clients WHERE registered = 1").fetchone()[0]
            recent = [
                issued_at
                for (issued_at,) in conn.execute(
                    "SELECT issued_at FROM clients WHERE registered = 1 AND issued_at > ?"
                    " ORDER BY issued_at DESC LIMIT ?",
                    (now - REGISTRATION_WINDOW_SECONDS, max_per_minute),
                )
            ]
            check_registration_quota(
                total=total, recent=recent, now=now, max_total=max_total, max_per_minute=max_per_minute
            )
            conn.execute(
                "INSERT INTO clients (client_id, secret_sha256, metadata, issued_at, registered)"
                " VALUES (?, ?, ?, ?, 1)",
                (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), now),
            )

    def client(self, client_id: str) -> DevClient | None:
        try:
            row = self._run(
                "SELECT secret_sha256, metadata FROM clients WHERE client_id = ?", (client_id,)
            ).fetchone()
        except UnicodeEncodeError:
            return None  # not valid Unicode (a lone surrogate): no stored id is
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
        conn.execute("UPDATE access_tokens SET revoked = 1 WHERE family = ?", (family,))
        logger.warning("%s: revoked every token of that grant (client %s)", reason, client_id)

    def _forget_old(self, conn: sqlite3.Connection, now: float) -> None:
        horizon = now - self.replay_memory_seconds
        conn.execute(
            "DELETE FROM codes WHERE (used = 0 AND expires_at <= ?) OR expires_at <= ?", (now, horizon)
        )
        conn.execute("DELETE FROM refresh_tokens WHERE expires_at <= ?", (now,))
        conn.execute("DELETE FROM revoked_families WHERE revoked_at <= ?", (horizon,))
        conn.execute("DELETE FROM access_tokens WHERE keep_until <= ?", (now,))

    # --- authorization codes ---
    def put_code(self, code: str, stored: StoredCode) -> None:
        checked(
            stored.client_id,
            stored.redirect_uri,
            stored.scope,
            stored.subject,
            stored.tenant,
            stored.resource,
            stored.code_challenge,
            stored.code_challenge_method,
            stored.family,
        )
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
        if not storable(code_sha256):
            return False  # no stored digest is
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
        checked(grant.client_id, grant.scope, grant.subject, grant.tenant, grant.resource, family)
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
        if not storable(token_sha256):
            return False  # no stored digest is
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

    # --- access tokens of grant families ---
    def remember_access_token(self, jti: str, family: str, keep_until: float) -> bool:
        """Remember an access token of `family`; born revoked (False) if the family is revoked."""
        checked(jti, family)
        now = time.time()
        with self._transaction() as conn:
            self._forget_old(conn, now)
            ((revoked,),) = conn.execute(
                "INSERT INTO access_tokens (jti, family, keep_until, revoked) VALUES (?, ?, ?,"
                " EXISTS (SELECT 1 FROM revoked_families WHERE family = ?)) RETURNING revoked",
                (jti, family, keep_until, family),
            ).fetchall()
        return not revoked

    def revoked_access_tokens(self, limit: int) -> list[RevokedAccessToken]:
        rows = self._run(
            "SELECT jti, keep_until FROM access_tokens WHERE revoked = 1 AND keep_until > ?"
            " ORDER BY keep_until LIMIT ?",
            (time.time(), limit),
        ).fetchall()
        return [RevokedAccessToken(jti, float(keep_until)) for jti, keep_until in rows]

    def forget_access_tokens(self, jtis: Sequence[str]) -> None:
        checked(*jtis)
        with self._transaction() as conn:
            conn.executemany("DELETE FROM access_tokens WHERE jti = ?", [(jti,) for jti in jtis])

    # --- sign-in attempts ---
    def admit_login(self, keys: Sequence[str], limits: LoginLimits) -> float:
        """Count one attempt against every key, or none if any key must still wait (the wait)."""
        checked(*keys)
        now = time.time()
        with self._transaction() as conn:
            counted: dict[str, tuple[int, float]] = {}
            for key in keys:
                row = conn.execute(
                    "SELECT failures, last_attempt FROM login_attempts WHERE key = ?", (key,)
                ).fetchone()
                if row is not None and not limits.forgotten(row[1], now):
                    counted[key] = (int(row[0]), float(row[1]))
            wait = max((limits.wait_seconds(key, *counted[key], now) for key in counted), default=0.0)
            if wait > 0:
                return wait
            for key in keys:
                conn.execute(
                    "INSERT INTO login_attempts (key, failures, last_attempt) VALUES (?, ?, ?)"
                    " ON CONFLICT (key) DO UPDATE SET failures = excluded.failures,"
                    " last_attempt = excluded.last_attempt",
                    (key, counted.get(key, (0, now))[0] + 1, now),
                )
            conn.execute("DELETE FROM login_attempts WHERE last_attempt <= ?", (now - limits.memory_seconds,))
            if len(counted) < len(keys):  # a new entry: keep at most `max_entries`, the newest
                conn.execute(
                    "DELETE FROM login_attempts WHERE key IN (SELECT key FROM login_attempts"
                    " ORDER BY last_attempt DESC LIMIT -1 OFFSET ?)",
                    (limits.max_entries,),
                )
        return 0.0

    def login_succeeded(self, *, reset: Sequence[str], uncount: Sequence[str]) -> None:
        checked(*reset, *uncount)
        with self._transaction() as conn:
            conn.executemany("DELETE FROM login_attempts WHERE key = ?", [(key,) for key in reset])
            conn.executemany(
                "UPDATE login_attempts SET failures = failures - 1 WHERE key = ? AND failures > 0",
                [(key,) for key in uncount],
            )
