"""A `devauth.db` written before grant families existed opens, upgrades in place, and loses nothing.

Its clients still resolve, its live refresh token still rotates (and is its own family from then on),
and its rotated-out token, replayed, is refused without touching anyone else's.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from aml_mcp.devauth.storage import Grant, digest
from aml_mcp.devauth.storage.sqlite import _MIGRATIONS, SqliteDevAuthStore

_FIRST_LAYOUT = """
CREATE TABLE clients (client_id TEXT PRIMARY KEY, secret_sha256 TEXT, metadata TEXT NOT NULL,
    issued_at REAL NOT NULL);
CREATE TABLE codes (code_sha256 TEXT PRIMARY KEY, client_id TEXT NOT NULL, redirect_uri TEXT NOT NULL,
    scope TEXT NOT NULL, subject TEXT NOT NULL, tenant TEXT NOT NULL, resource TEXT NOT NULL,
    code_challenge TEXT NOT NULL, code_challenge_method TEXT NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE refresh_tokens (token_sha256 TEXT PRIMARY KEY, client_id TEXT NOT NULL, scope TEXT NOT NULL,
    subject TEXT NOT NULL, tenant TEXT NOT NULL, resource TEXT NOT NULL, expires_at REAL NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0);
"""


def _first_layout(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.executescript(_FIRST_LAYOUT)
    later = time.time() + 3_600
    conn.execute(
        "INSERT INTO clients VALUES ('registered-1', NULL, ?, ?)",
        ('{"redirect_uris": ["http://127.0.0.1/cb"], "token_endpoint_auth_method": "none"}', time.time()),
    )
    for token, revoked in (("live-a", 0), ("rotated-b", 1), ("live-c", 0)):
        conn.execute(
            "INSERT INTO refresh_tokens VALUES (?, 'registered-1', 'aml:read', 'alice', 'bank-a', 'r', ?, ?)",
            (digest(token), later, revoked),
        )
    conn.commit()
    conn.close()


def test_an_old_store_upgrades_in_place(tmp_path: Path) -> None:
    path = tmp_path / "devauth.db"
    _first_layout(path)
    store = SqliteDevAuthStore(path)
    try:
        client = store.client("registered-1")
        assert client is not None and client.check_redirect_uri("http://127.0.0.1:5000/cb")
        live = store.refresh_token("live-a")
        assert live is not None and live.family
        assert store.redeem_refresh_token(live.token_sha256)
        grant = Grant(live.client_id, live.scope, live.subject, live.tenant, live.resource, live.family)
        assert store.put_refresh_token("next-a", grant, 60)
        assert store.refresh_token("next-a") is not None
        # The rotated-out token of another old grant is a replay: refused, and only its own family goes.
        assert store.refresh_token("rotated-b") is None
        assert store.refresh_token("next-a") is not None and store.refresh_token("live-c") is not None
    finally:
        store.close()
    # Opening it again applies nothing twice.
    SqliteDevAuthStore(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(_MIGRATIONS)
    conn.close()
