"""`aml-mcp serve` judges exposure on the public URL too, not only on `--host` (review finding N2).

A replica bound to loopback behind a proxy, started with `--public-url https://aml.bank.example/mcp`,
serves whoever reaches the proxy: with the defaults that was the development authorization server
(demo users signing in, open registration), the lab's authorization simulation, or, with
authentication off, every request as the local principal. Each case runs the real command in a
child process; the production set-up (development server and simulation off, a real issuer
trusted) is served and answers over real HTTP on its loopback bind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.mcp_http import message, post
from tests.support.oauth import TestIssuer
from tests.support.subprocess_server import ServerProcess

PUBLIC_URL = "https://aml.bank.example/mcp"
SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}
EXIT_SETTINGS = 2


def serve(data_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`aml-mcp serve` to its end (a refusal ends it at once; a server that starts times out)."""
    return subprocess.run(
        [sys.executable, "-m", "aml_mcp", "serve", "--port", "0", "--data-dir", str(data_dir), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **SMALL_DEMO, **env},
        check=False,
    )


def the_one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == EXIT_SETTINGS, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("env", "named", "not_named"),
    [
        (
            {},
            ["AML_MCP_AUTH__DEV__ENABLED=false", "AML_MCP_LAB__SIMULATION=false", "AML_MCP_AUTH__ISSUERS"],
            ["AML_MCP_AUTH__ENABLED"],
        ),
        (
            {"AML_MCP_AUTH__ENABLED": "false"},
            ["AML_MCP_AUTH__ENABLED=true", "AML_MCP_AUTH__DEV__ENABLED=false", "AML_MCP_AUTH__ISSUERS"],
            ["AML_MCP_LAB__SIMULATION"],
        ),
        (
            {"AML_MCP_LAB__SIMULATION": "false"},
            ["AML_MCP_AUTH__DEV__ENABLED=false", "AML_MCP_AUTH__ISSUERS"],
            ["AML_MCP_LAB__SIMULATION", "AML_MCP_AUTH__ENABLED="],
        ),
    ],
    ids=["defaults", "authentication off", "simulation off, development server on"],
)
def test_a_public_url_with_loopback_only_features_exits_2_in_one_line_before_loading_anything(
    env: dict[str, str], named: list[str], not_named: list[str], tmp_path: Path
) -> None:
    line = the_one_line(serve(tmp_path / "data", env, "--public-url", PUBLIC_URL))
    assert line.startswith(f"aml-mcp: refusing to serve for the public URL {PUBLIC_URL}: "), line
    assert "for loopback only" in line
    for setting in named:
        assert setting in line, line
    for setting in not_named:
        assert setting not in line, line
    assert not (tmp_path / "data" / "notes.db").exists()  # refused before the demo corpus loads


def test_the_production_set_up_starts_for_a_public_url(tmp_path: Path, issuer: TestIssuer) -> None:
    production = {
        "AML_MCP_AUTH__DEV__ENABLED": "false",
        "AML_MCP_LAB__SIMULATION": "false",
        "AML_MCP_AUTH__ISSUERS": json.dumps([{"issuer": issuer.issuer}]),
        **SMALL_DEMO,
    }
    args = ["serve", "--data-dir", str(tmp_path / "data"), "--public-url", PUBLIC_URL]
    with ServerProcess(args, env=production) as server:
        ready = httpx.get(f"{server.url}/readyz", timeout=10)
        assert ready.status_code == 200 and ready.json() == {"status": "ready"}
        public = {"Host": "aml.bank.example"}  # what the proxy passes through
        metadata = httpx.get(f"{server.url}/.well-known/oauth-protected-resource/mcp", headers=public)
        assert metadata.status_code == 200, metadata.text
        assert metadata.json()["resource"] == PUBLIC_URL
        assert metadata.json()["authorization_servers"] == [issuer.issuer]
        # Nothing of the development server or the lab is served for the public host.
        for path in ("/.well-known/oauth-authorization-server/oauth", "/oauth/authorize", "/lab"):
            assert httpx.get(f"{server.url}{path}", headers=public).status_code == 404, path
        token = issuer.mint(audience=PUBLIC_URL, subject="alice", tenant="meridian-bank", scope="aml:read")
        with httpx.Client(base_url=server.url, timeout=10) as client:
            listed = post(client, message("tools/list"), token=token, host="aml.bank.example")
            assert listed.status_code == 200, listed.text
            assert "search_aml_notes" in listed.text
            anonymous = post(client, message("tools/list"), host="aml.bank.example")
            assert anonymous.status_code == 401
        server.terminate()
        assert server.wait(30) == 0
