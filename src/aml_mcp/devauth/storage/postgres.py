"""The development authorization server's state in the shared PostgreSQL database.

Replicas behind a load balancer each answer any request, so a code issued by replica A must be
redeemable on B, a refresh token rotated on A and replayed on B must revoke its family, and a
token signed by A must verify on B. This module keeps clients, codes, refresh tokens, revoked
grant families (`PostgresDevAuthStore`) and the signing keys (`PostgresKeyStorage`) in tables of
the deployment's database (and schema), with the behaviour of `sqlite.SqliteDevAuthStore` and
`files.FilesKeyStorage` (`tests/contract/test_devauth_store.py` and `test_devauth_keys.py` run both).

**Synchronous, on a small pool of its own** (`SyncPostgres`, named `APPLICATION_NAME`). authlib's
grant hooks are synchronous and the routes run them on worker threads (`anyio.to_thread`), never on
the event loop; the issuer is also built, and `aml-mcp token` / `aml-mcp devauth …` run, where no
event loop exists at all. Bridging those threads to the app's async pool would need the loop
(`anyio.from_thread`) and would fail before the lifespan opened the pool. A blocking pool (at most
`DEFAULT_MAX_SIZE` connections) is the simplest correct bridge for a low-volume development
server: a blocked worker thread blocks nobody else. Count these connections in the connection
budget. `open_database` opens it and brings the tables (`MIGRATION`) up to date.

**Concurrency across processes** is the database's, not a lock in this process:

- redeeming a code or a refresh token is a conditional `UPDATE … WHERE NOT used … RETURNING`:
  PostgreSQL re-checks the condition after a concurrent updater commits, so exactly one caller
  gets the row, on whichever replica it runs;
- redeeming, revoking a family after a replay, and storing a new refresh token (which checks
  whether its family is revoked) each run under a transaction-scoped advisory lock on the family,
  taken before any of its rows: without it, under READ COMMITTED, a replay on one replica and a
  rotation on another could each miss the other's uncommitted row and leave a live token in a
  revoked family;
- a registration counts the quota and inserts under a transaction-scoped advisory lock, so
  registrations on all replicas together stay within it;
- a sign-in attempt checks its backoff and counts itself under one advisory lock, so guesses sent
  to every replica at once are counted one after the other (the limiter's counts are shared).

**Time** is the database's (`devauth_now()`, the epoch seconds of `clock_timestamp()`), so
replicas whose clocks differ agree on when a code or refresh token expires.

**Hostile values.** PostgreSQL `TEXT` cannot hold NUL, and psycopg cannot send a lone surrogate:
looking up such a client id finds nothing (as in SQLite), and storing one raises
`UnstorableValue` (a `ValueError`) before the database sees it. Codes and refresh tokens are only
ever stored and looked up as digests.

**Protection.** The tables are created with `REVOKE ALL … FROM PUBLIC`; the signing keys' private
halves are in `devauth_signing_keys`, not encrypted at rest: whoever reads that table can mint
tokens this deployment accepts, so treat backups like the `keys/` directory.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

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
from aml_mcp.store.locks import AdvisoryLock, LockClass
from aml_mcp.store.migrations import Migration
from aml_mcp.store.postgres import PostgresDatabase
from aml_mcp.store.postgres_sync import DEFAULT_MAX_SIZE, SyncPostgres
from aml_mcp.store.text import storable

logger = logging.getLogger(__name__)

APPLICATION_NAME = "aml-mcp-devauth"
"""How the issuer's connections are named in `pg_stat_activity` (apart from the app's pool)."""

_ADD_CLIENT = (
    "INSERT INTO devauth_clients (client_id, secret_sha256, metadata, issued_at)"
    " VALUES (%s, %s, %s, devauth_now()) ON CONFLICT (client_id) DO NOTHING"
)
_REPLACE_CLIENT = (
    "INSERT INTO devauth_clients (client_id, secret_sha256, metadata, issued_at)"
    " VALUES (%s, %s, %s, devauth_now()) ON CONFLICT (client_id)"
    " DO UPDATE SET secret_sha256 = EXCLUDED.secret_sha256, metadata = EXCLUDED.metadata,"
    " issued_at = EXCLUDED.issued_at, registered = FALSE"
)

_STEPS: tuple[str, ...] = (
    """
    CREATE FUNCTION devauth_now() RETURNS DOUBLE PRECISION VOLATILE LANGUAGE sql
        AS 'SELECT extract(epoch FROM clock_timestamp())::double precision';
    CREATE TABLE devauth_clients (
        client_id TEXT PRIMARY KEY,
        secret_sha256 TEXT,
        metadata TEXT NOT NULL,
        issued_at DOUBLE PRECISION NOT NULL,
        registered BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX devauth_clients_by_registration ON devauth_clients (registered, issued_at);
    CREATE TABLE devauth_codes (
        code_sha256 TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        redirect_uri TEXT NOT NULL,
        scope TEXT NOT NULL,
        subject TEXT NOT NULL,
        tenant TEXT NOT NULL,
        resource TEXT NOT NULL,
        code_challenge TEXT NOT NULL,
        code_challenge_method TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        family TEXT NOT NULL,
        used BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX devauth_codes_by_family ON devauth_codes (family);
    CREATE TABLE devauth_refresh_tokens (
        token_sha256 TEXT PRIMARY KEY,
        client_id TEXT NOT NULL,
        scope TEXT NOT NULL,
        subject TEXT NOT NULL,
        tenant TEXT NOT NULL,
        resource TEXT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL,
        family TEXT NOT NULL,
        revoked BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX devauth_refresh_tokens_by_family ON devauth_refresh_tokens (family);
    CREATE TABLE devauth_revoked_families (
        family TEXT PRIMARY KEY,
        revoked_at DOUBLE PRECISION NOT NULL,
        reason TEXT NOT NULL
    );
    CREATE TABLE devauth_signing_keys (
        id BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (id),
        document BYTEA NOT NULL,
        version TEXT NOT NULL
    );
    REVOKE ALL ON devauth_clients, devauth_codes, devauth_refresh_tokens, devauth_revoked_families,
        devauth_signing_keys FROM PUBLIC;
    """,
    # The access tokens minted for each grant family while they live (a replay revokes them too;
    # `revoked` rows are the outbox to the resource server's revocation list), and the sign-in
    # limiter's counts.
    """
    CREATE TABLE devauth_access_tokens (
        jti TEXT PRIMARY KEY,
        family TEXT NOT NULL,
        keep_until DOUBLE PRECISION NOT NULL,
        revoked BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX devauth_access_tokens_by_family ON devauth_access_tokens (family);
    CREATE INDEX devauth_access_tokens_revoked ON devauth_access_tokens (keep_until) WHERE revoked;
    CREATE TABLE devauth_login_attempts (
        key TEXT PRIMARY KEY,
        failures INTEGER NOT NULL,
        last_attempt DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX devauth_login_attempts_by_time ON devauth_login_attempts (last_attempt);
    REVOKE ALL ON devauth_access_tokens, devauth_login_attempts FROM PUBLIC;
    """,
)

MIGRATION = Migration("devauth", _STEPS)
"""The issuer's tables: append-only steps, each applied once in a transaction of its own."""


def open_database(shared: PostgresDatabase, *, max_size: int = DEFAULT_MAX_SIZE) -> SyncPostgres:
    """The issuer's pool on `shared`, open, with its tables up to date.

    A database that cannot be reached fails here, at start-up, as the shared secrets do; replicas
    starting at once apply `MIGRATION` once (`SyncPostgres.apply` takes the migration lock).
    """
    database = SyncPostgres(shared, name=APPLICATION_NAME, max_size=max_size).open()
    try:
        database.apply(MIGRATION)
    except BaseException:
        database.close()
        raise
    return database


def _lock_family(conn: psycopg.Connection[Any], family: str) -> None:
    """Serialize, across processes, everything that redeems, revokes or adds to `family`.

    Always taken before any row of the family is locked: an `UPDATE` that waits for a concurrent
    updater keeps the row locked even when the row then no longer matches (PostgreSQL's READ
    COMMITTED re-check), so taking this lock after such an `UPDATE` could deadlock with a revoker.
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (LockClass.DEVAUTH_FAMILY, family))


class PostgresDevAuthStore:
    """Clients, codes and refresh tokens in the shared database (see the module docstring)."""

    def __init__(self, database: SyncPostgres, *, replay_memory_seconds: float = 86_400.0) -> None:
        self.database = database
        self.replay_memory_seconds = replay_memory_seconds

    def close(self) -> None:
        self.database.close()

    # --- clients ---
    def put_client(self, client: DevClient, *, replace: bool = True) -> None:
        checked(client.client_id, client.secret_sha256)
        statement = _REPLACE_CLIENT if replace else _ADD_CLIENT
        with self.database.transaction() as conn:
            conn.execute(
                statement, (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()))
            )

    def register_client(self, client: DevClient, *, max_total: int, max_per_minute: int) -> None:
        checked(client.client_id, client.secret_sha256)
        with self.database.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (AdvisoryLock.DEVAUTH_REGISTRATION,))
            row = conn.execute(
                "SELECT COUNT(*), devauth_now() FROM devauth_clients WHERE registered"
            ).fetchone()
            assert row is not None
            total, now = int(row[0]), float(row[1])
            recent = [
                float(issued_at)
                for (issued_at,) in conn.execute(
                    "SELECT issued_at FROM devauth_clients WHERE registered AND issued_at > %s"
                    " ORDER BY issued_at DESC LIMIT %s",
                    (now - REGISTRATION_WINDOW_SECONDS, max_per_minute),
                )
            ]
            check_registration_quota(
                total=total, recent=recent, now=now, max_total=max_total, max_per_minute=max_per_minute
            )
            conn.execute(
                "INSERT INTO devauth_clients (client_id, secret_sha256, metadata, issued_at, registered)"
                " VALUES (%s, %s, %s, %s, TRUE)",
                (client.client_id, client.secret_sha256, json.dumps(client.to_metadata()), now),
            )

    def client(self, client_id: str) -> DevClient | None:
        if not storable(client_id):
            return None  # no stored id holds what TEXT cannot
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT secret_sha256, metadata FROM devauth_clients WHERE client_id = %s", (client_id,)
            ).fetchone()
        if row is None:
            return None
        return DevClient.from_metadata(client_id, json.loads(row[1]), row[0])

    # --- grant families ---
    def _revoke_family(self, conn: psycopg.Connection[Any], family: str, client_id: str, reason: str) -> None:
        """Inside a transaction: every refresh token and code of `family` stops working, for good."""
        _lock_family(conn, family)
        conn.execute(
            "INSERT INTO devauth_revoked_families (family, revoked_at, reason)"
            " VALUES (%s, devauth_now(), %s) ON CONFLICT (family) DO NOTHING",
            (family, reason),
        )
        conn.execute("UPDATE devauth_refresh_tokens SET revoked = TRUE WHERE family = %s", (family,))
        conn.execute("UPDATE devauth_codes SET used = TRUE WHERE family = %s", (family,))
        conn.execute("UPDATE devauth_access_tokens SET revoked = TRUE WHERE family = %s", (family,))
        logger.warning("%s: revoked every token of that grant (client %s)", reason, client_id)

    def _forget_old(self) -> None:
        """Delete what expired, each statement its own transaction and skipping rows another
        transaction holds: housekeeping never waits for a request, so it cannot deadlock with one
        (inside a request's transaction its row locks could meet a revoker's in another order)."""
        with self.database.connection() as conn:
            conn.execute(
                "DELETE FROM devauth_codes WHERE code_sha256 IN (SELECT code_sha256 FROM devauth_codes"
                " WHERE (NOT used AND expires_at <= devauth_now()) OR expires_at <= devauth_now() - %s"
                " FOR UPDATE SKIP LOCKED)",
                (self.replay_memory_seconds,),
            )
            conn.execute(
                "DELETE FROM devauth_refresh_tokens WHERE token_sha256 IN (SELECT token_sha256"
                " FROM devauth_refresh_tokens WHERE expires_at <= devauth_now() FOR UPDATE SKIP LOCKED)"
            )
            conn.execute(
                "DELETE FROM devauth_revoked_families WHERE family IN (SELECT family FROM"
                " devauth_revoked_families WHERE revoked_at <= devauth_now() - %s FOR UPDATE SKIP LOCKED)",
                (self.replay_memory_seconds,),
            )
            conn.execute(
                "DELETE FROM devauth_access_tokens WHERE jti IN (SELECT jti FROM devauth_access_tokens"
                " WHERE keep_until <= devauth_now() FOR UPDATE SKIP LOCKED)"
            )

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
        self._forget_old()
        with self.database.transaction() as conn:
            conn.execute(
                "INSERT INTO devauth_codes (code_sha256, client_id, redirect_uri, scope, subject, tenant,"
                " resource, code_challenge, code_challenge_method, expires_at, family)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, devauth_now() + %s, %s)",
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
                    CODE_TTL_SECONDS,
                    stored.family or new_family(),
                ),
            )

    def code(self, code: str, client_id: str) -> StoredCode | None:
        code_sha256 = digest(code)
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT client_id, scope, subject, tenant, resource, family, redirect_uri, code_challenge,"
                " code_challenge_method, used, expires_at <= devauth_now()"
                " FROM devauth_codes WHERE code_sha256 = %s",
                (code_sha256,),
            ).fetchone()
            if row is None:
                return None
            if row[9]:
                self._revoke_family(conn, row[5], row[0], "authorization code replayed")
                return None
        if row[0] != client_id or row[10]:
            return None
        return StoredCode(
            client_id=row[0],
            scope=row[1],
            subject=row[2],
            tenant=row[3],
            resource=row[4],
            family=row[5],
            redirect_uri=row[6],
            code_challenge=row[7],
            code_challenge_method=row[8],
            code_sha256=code_sha256,
        )

    def redeem_code(self, code_sha256: str) -> bool:
        if not storable(code_sha256):
            return False  # no stored digest is
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT family, client_id FROM devauth_codes WHERE code_sha256 = %s", (code_sha256,)
            ).fetchone()
            if row is None:
                return False
            _lock_family(conn, row[0])
            redeemed = conn.execute(
                "UPDATE devauth_codes SET used = TRUE WHERE code_sha256 = %s AND NOT used"
                " AND expires_at > devauth_now() RETURNING used",
                (code_sha256,),
            ).fetchall()
            if redeemed:
                return True
            used = conn.execute(
                "SELECT used FROM devauth_codes WHERE code_sha256 = %s", (code_sha256,)
            ).fetchone()
            if used is not None and used[0]:
                self._revoke_family(conn, row[0], row[1], "authorization code redeemed twice")
            return False

    # --- refresh tokens ---
    def put_refresh_token(self, token: str, grant: Grant, ttl_seconds: int) -> bool:
        family = grant.family or new_family()
        checked(grant.client_id, grant.scope, grant.subject, grant.tenant, grant.resource, family)
        self._forget_old()
        with self.database.transaction() as conn:
            _lock_family(conn, family)
            row = conn.execute(
                "INSERT INTO devauth_refresh_tokens (token_sha256, client_id, scope, subject, tenant,"
                " resource, expires_at, family, revoked)"
                " VALUES (%s, %s, %s, %s, %s, %s, devauth_now() + %s, %s,"
                " EXISTS (SELECT 1 FROM devauth_revoked_families WHERE family = %s))"
                " RETURNING revoked",
                (
                    digest(token),
                    grant.client_id,
                    grant.scope,
                    grant.subject,
                    grant.tenant,
                    grant.resource,
                    ttl_seconds,
                    family,
                    family,
                ),
            ).fetchone()
        assert row is not None
        return not row[0]

    def refresh_token(self, token: str) -> StoredRefreshToken | None:
        token_sha256 = digest(token)
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT client_id, scope, subject, tenant, resource, family, revoked,"
                " expires_at <= devauth_now() FROM devauth_refresh_tokens WHERE token_sha256 = %s",
                (token_sha256,),
            ).fetchone()
            if row is None:
                return None
            if row[6]:
                self._revoke_family(conn, row[5], row[0], "refresh token reused")
                return None
        if row[7]:
            return None
        return StoredRefreshToken(
            client_id=row[0],
            scope=row[1],
            subject=row[2],
            tenant=row[3],
            resource=row[4],
            family=row[5],
            token_sha256=token_sha256,
        )

    def redeem_refresh_token(self, token_sha256: str) -> bool:
        if not storable(token_sha256):
            return False  # no stored digest is
        with self.database.transaction() as conn:
            row = conn.execute(
                "SELECT family, client_id FROM devauth_refresh_tokens WHERE token_sha256 = %s",
                (token_sha256,),
            ).fetchone()
            if row is None:
                return False
            _lock_family(conn, row[0])
            redeemed = conn.execute(
                "UPDATE devauth_refresh_tokens SET revoked = TRUE WHERE token_sha256 = %s AND NOT revoked"
                " AND expires_at > devauth_now() RETURNING revoked",
                (token_sha256,),
            ).fetchall()
            if redeemed:
                return True
            revoked = conn.execute(
                "SELECT revoked FROM devauth_refresh_tokens WHERE token_sha256 = %s", (token_sha256,)
            ).fetchone()
            if revoked is not None and revoked[0]:
                self._revoke_family(conn, row[0], row[1], "refresh token redeemed twice")
            return False

    # --- access tokens of grant families ---
    def remember_access_token(self, jti: str, family: str, keep_until: float) -> bool:
        checked(jti, family)
        self._forget_old()
        with self.database.transaction() as conn:
            _lock_family(conn, family)
            row = conn.execute(
                "INSERT INTO devauth_access_tokens (jti, family, keep_until, revoked) VALUES (%s, %s, %s,"
                " EXISTS (SELECT 1 FROM devauth_revoked_families WHERE family = %s)) RETURNING revoked",
                (jti, family, keep_until, family),
            ).fetchone()
        assert row is not None
        return not row[0]

    def revoked_access_tokens(self, limit: int) -> list[RevokedAccessToken]:
        with self.database.connection() as conn:
            rows = conn.execute(
                "SELECT jti, keep_until FROM devauth_access_tokens WHERE revoked"
                " AND keep_until > devauth_now() ORDER BY keep_until LIMIT %s",
                (limit,),
            ).fetchall()
        return [RevokedAccessToken(str(jti), float(keep_until)) for jti, keep_until in rows]

    def forget_access_tokens(self, jtis: Sequence[str]) -> None:
        checked(*jtis)
        if not jtis:
            return
        with self.database.transaction() as conn:
            conn.execute("DELETE FROM devauth_access_tokens WHERE jti = ANY(%s)", (list(jtis),))

    # --- sign-in attempts ---
    def admit_login(self, keys: Sequence[str], limits: LoginLimits) -> float:
        checked(*keys)
        with self.database.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (AdvisoryLock.DEVAUTH_SIGN_IN,))
            now_row = conn.execute("SELECT devauth_now()").fetchone()
            assert now_row is not None
            now = float(now_row[0])
            counted: dict[str, tuple[int, float]] = {}
            for key, failures, last_attempt in conn.execute(
                "SELECT key, failures, last_attempt FROM devauth_login_attempts WHERE key = ANY(%s)",
                (list(keys),),
            ):
                if not limits.forgotten(float(last_attempt), now):
                    counted[str(key)] = (int(failures), float(last_attempt))
            wait = max((limits.wait_seconds(key, *counted[key], now) for key in counted), default=0.0)
            if wait > 0:
                return wait
            for key in keys:
                conn.execute(
                    "INSERT INTO devauth_login_attempts (key, failures, last_attempt) VALUES (%s, %s, %s)"
                    " ON CONFLICT (key) DO UPDATE SET failures = EXCLUDED.failures,"
                    " last_attempt = EXCLUDED.last_attempt",
                    (key, counted.get(key, (0, now))[0] + 1, now),
                )
            conn.execute(
                "DELETE FROM devauth_login_attempts WHERE last_attempt <= %s", (now - limits.memory_seconds,)
            )
            if len(counted) < len(keys):  # a new entry: keep at most `max_entries`, the newest
                conn.execute(
                    "DELETE FROM devauth_login_attempts WHERE key IN (SELECT key FROM devauth_login_attempts"
                    " ORDER BY last_attempt DESC OFFSET %s)",
                    (limits.max_entries,),
                )
        return 0.0

    def login_succeeded(self, *, reset: Sequence[str], uncount: Sequence[str]) -> None:
        checked(*reset, *uncount)
        with self.database.transaction() as conn:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (AdvisoryLock.DEVAUTH_SIGN_IN,))
            conn.execute("DELETE FROM devauth_login_attempts WHERE key = ANY(%s)", (list(reset),))
            conn.execute(
                "UPDATE devauth_login_attempts SET failures = failures - 1"
                " WHERE key = ANY(%s) AND failures > 0",
                (list(uncount),),
            )


class PostgresKeyStorage:
    """The signing keys' document in one row of `devauth_signing_keys`, shared by every replica.

    The first process to need it inserts a fresh one (`ON CONFLICT DO NOTHING`: when two start at
    once, one row wins and both read it). A rotation locks the row (`SELECT … FOR UPDATE`), so two
    rotations at once both keep their keys. Every write sets a new random version, by which the
    other processes notice the change on their next signature or JWKS read.
    """

    def __init__(self, database: SyncPostgres) -> None:
        self.database = database

    def version(self) -> object | None:
        with self.database.transaction() as conn:
            row = conn.execute("SELECT version FROM devauth_signing_keys").fetchone()
        return None if row is None else str(row[0])

    def read(self) -> tuple[bytes, object]:
        with self.database.transaction() as conn:
            row = conn.execute("SELECT document, version FROM devauth_signing_keys").fetchone()
        if row is None:
            raise LookupError("the development signing keys are missing from the database")
        return bytes(row[0]), str(row[1])

    def create(self, document: bytes) -> None:
        with self.database.transaction() as conn:
            conn.execute(
                "INSERT INTO devauth_signing_keys (document, version) VALUES (%s, %s)"
                " ON CONFLICT (id) DO NOTHING",
                (document, secrets.token_hex(8)),
            )

    def update(self, change: Callable[[bytes], bytes]) -> None:
        with self.database.transaction() as conn:
            row = conn.execute("SELECT document FROM devauth_signing_keys FOR UPDATE").fetchone()
            if row is None:
                raise LookupError("the development signing keys are missing from the database")
            conn.execute(
                "UPDATE devauth_signing_keys SET document = %s, version = %s",
                (change(bytes(row[0])), secrets.token_hex(8)),
            )
