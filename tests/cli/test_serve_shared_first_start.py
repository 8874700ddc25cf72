"""Three `aml-mcp serve` processes started at the same moment against one empty PostgreSQL schema
(each with its own data directory): the demo corpus is loaded once, by one of them, and all three
serve it."""

from __future__ import annotations

from pathlib import Path

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.notes.storage.postgres import PostgresNotes
from aml_mcp.store.postgres import PostgresDatabase
from tests.support.postgres import scratch_schema
from tests.support.subprocess_server import ServerProcess

NOTES = 150


def test_three_replicas_starting_at_once_load_the_demo_once(tmp_path: Path) -> None:
    with scratch_schema() as (url, schema):
        env = {
            "AML_MCP_DATABASE_URL": url,
            "AML_MCP_DATABASE_SCHEMA": schema,
            "AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(NOTES),
            "AML_MCP_AML__EMBEDDER": "static",
        }
        servers = [
            ServerProcess(
                ["serve", "--data-dir", str(tmp_path / f"r{n}"), "--public-url", "http://127.0.0.1:9/mcp"],
                env=env,
            ).spawn()
            for n in range(3)
        ]
        try:
            for server in servers:  # all three go at once, before any is waited for
                assert server.proc is not None and server.proc.stdin is not None
                server.proc.stdin.write(b"go\n")
                server.proc.stdin.close()
            for server in servers:
                server.start(timeout=120)
            with PostgresNotes(PostgresDatabase(url, schema=schema), max_connections=2) as store:
                assert {t: store.tenant(t).count() for t in store.tenants()} == {
                    t.name: NOTES for t in TENANTS
                }
        finally:
            for server in servers:
                server.terminate()
            for server in servers:
                if server.proc is not None:
                    server.proc.wait(30)
        logs = [server.stderr() for server in servers]
        for server in servers:
            server.kill()  # ended already: closes its log
        loaded = [log for log in logs if "loaded the demo corpus" in log]
        assert len(loaded) == 1, logs
