"""After a real `aml-mcp serve` started under umask 022, every file in the data directory is 0600
and every directory 0700: databases, their WAL and shared-memory files, keys and audit.jsonl."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.support.subprocess_server import ServerProcess

SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}


def loose_modes(data_dir: Path) -> dict[str, str]:
    """Everything under `data_dir` (itself included) that is not owner-only, with its mode."""
    loose: dict[str, str] = {}
    for path in [data_dir, *data_dir.rglob("*")]:
        mode = stat.S_IMODE(path.lstat().st_mode)
        wanted = 0o700 if path.is_dir() else 0o600
        if mode != wanted:
            loose[str(path.relative_to(data_dir))] = oct(mode)
    return loose


def search(server: ServerProcess, token: str) -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "search_aml_notes",
            "arguments": {"query": "cash deposits"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {
        "authorization": f"Bearer {token}",
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
        "mcp-method": "tools/call",
        "mcp-name": "search_aml_notes",
    }
    response = httpx.post(f"{server.url}/mcp", json=body, headers=headers, timeout=30)
    assert response.status_code == 200, response.text
    assert response.json()["result"].get("isError") is not True


def test_every_file_of_a_served_data_dir_is_owner_only_under_umask_022(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    previous = os.umask(0o022)  # the child inherits it, as from a login shell
    try:
        server = ServerProcess(["serve", "--data-dir", str(data_dir)], env=SMALL_DEMO).start(timeout=120)
    finally:
        os.umask(previous)
    try:
        httpx.post(f"{server.url}/mcp", json={})  # refused and audited
        mint = ["token", "--data-dir", str(data_dir), "--port", str(server.port)]
        token = subprocess.run(
            [sys.executable, "-m", "aml_mcp", *mint, "--subject", "alice", "--tenant", "meridian-bank"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        search(server, token)
        deadline = time.monotonic() + 10
        while not (data_dir / "audit.jsonl").exists():
            assert time.monotonic() < deadline, "no audit.jsonl was written"
            time.sleep(0.05)
        names = {p.name for p in data_dir.iterdir()}
        assert {"aml-mcp.db-wal", "aml-mcp.db-shm", "notes.db", "devauth.db", "keys"} <= names
        assert loose_modes(data_dir) == {}  # while serving: WAL and shared-memory files included
    finally:
        server.terminate()
        server.wait(30)
    assert loose_modes(data_dir) == {}
