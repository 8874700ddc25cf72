"""`aml-mcp cluster` prints a token command that works for the cluster it started (friction log F4):
run as printed, it mints a token the cluster accepts, because it names the cluster's schema, where
the development issuer's key is. The real command (HAProxy and one API replica, no worker: small)
on the shared PostgreSQL, in a child process; the token is used through the balancer over HTTP."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.options import shared_state_args
from tests.support.mcp_http import call_tool
from tests.support.postgres import check_reachable, database_url
from tests.support.waiting import eventually

TOKEN_WORDS = (" token --database-url ", "AML_MCP_DATABASE_SCHEMA=")


def _stderr_lines(stderr: Path) -> list[str]:
    return stderr.read_text(errors="replace").splitlines()


@pytest.mark.scaleout
@pytest.mark.slow
def test_the_printed_token_command_gives_a_token_the_cluster_accepts(tmp_path: Path) -> None:
    url = database_url()
    check_reachable(url)
    env = {
        k: v for k, v in os.environ.items() if not k.startswith("AML_MCP_") or k == "AML_MCP_AML__EMBEDDER"
    }
    env["AML_MCP_AML__DEMO_NOTES_PER_TENANT"] = "40"
    stderr = tmp_path / "cluster.stderr"
    with stderr.open("wb") as err, tempfile.TemporaryFile() as out:
        cluster = subprocess.Popen(
            [sys.executable, "-m", "aml_mcp", "cluster", "--replicas", "1", "--workers", "0",
             "--database-url", url],
            env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=tmp_path,
        )  # fmt: skip
        try:
            eventually(
                lambda: (
                    cluster.poll() is not None or any("Ctrl-C stops them" in x for x in _stderr_lines(stderr))
                ),
                timeout=180,
                interval=0.2,
                what="the cluster to start",
            )
            lines = _stderr_lines(stderr)
            assert cluster.poll() is None, lines
            out.seek(0)
            mcp_url = out.read().decode().strip().splitlines()[0]
            command = next(line.strip() for line in lines if all(word in line for word in TOKEN_WORDS))
            assert f"--public-url {mcp_url}" in command
            # As a user pastes it, in a shell with none of the cluster's settings.
            minted = subprocess.run(
                ["bash", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120,
                check=False,
            )  # fmt: skip
            assert minted.returncode == 0, minted.stderr
            token = minted.stdout.strip()
            with httpx.Client(base_url=mcp_url.removesuffix("/mcp"), timeout=30) as http:
                answer = call_tool(
                    http, "search_aml_notes", {"query": "cash deposits", "top_k": 2}, token=token
                )
            assert answer.status_code == 200, answer.text
            assert answer.json()["result"]["structuredContent"]["results"], answer.text
        finally:
            cluster.send_signal(signal.SIGINT)
            try:
                cluster.wait(60)
            except subprocess.TimeoutExpired:
                cluster.kill()
                cluster.wait(10)


@pytest.mark.parametrize(
    "url",
    ["postgresql://u:secret@h/db", "postgresql://u@h/db?password=secret", "host=h password=secret"],
)
def test_a_database_url_with_a_password_is_never_printed(url: str) -> None:
    env, options = shared_state_args(url, "cluster_1")
    assert "secret" not in env + options and options == ' --database-url "$AML_MCP_DATABASE_URL"'
    assert env == "AML_MCP_DATABASE_SCHEMA=cluster_1 "
