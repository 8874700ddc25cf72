"""`aml-mcp cluster` says what it will ask of PostgreSQL before it starts anything: its connection
budget per process and in all, with the formula, as the first line on stderr, even when the start
then fails (here: a database nobody listens on)."""

from __future__ import annotations

import os
import subprocess
import sys

from aml_mcp.cli.startup import EXIT_SETTINGS


def test_the_budget_is_the_first_line_even_when_the_cluster_cannot_start() -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("AML_MCP_")}
    env["AML_MCP_DATABASE_POOL_SIZE"] = "3"
    done = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "cluster", "--replicas", "2", "--workers", "1",
         "--database-url", "postgresql://postgres@127.0.0.1:1/nothing", "--catalog", "conformance"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    first = done.stderr.splitlines()[0]
    assert first.startswith("aml-mcp cluster: connection budget: 26 = 2 replicas x 9 "), first
    assert "+ 1 worker x 8 " in first and "R x (P + 6) + W x (P + 5), P = database_pool_size = 3" in first
    assert done.returncode == EXIT_SETTINGS, done.stderr
