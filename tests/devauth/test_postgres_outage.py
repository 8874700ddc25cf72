"""When the development issuer's database connections are cut, clients get 503 and a retry, then it recovers;
a command pointed at a database that cannot be reached says so in one line.

The server terminates every connection of the issuer's pool (`pg_terminate_backend`, as a restart
or a failover would): the next request meets a dead connection. It must be answered 503 with
`Retry-After` (the store's condition, not the client's fault, and never a 500), and the pool
replaces the connection, so a request shortly after succeeds.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from aml_mcp.cli import main as cli_main
from aml_mcp.cli.startup import EXIT_DATA_DIR
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.storage.postgres import APPLICATION_NAME
from tests.support.dev_issuer import probe_catalog
from tests.support.oauth import auth_settings, secured_server
from tests.support.postgres import scratch_schema
from tests.support.waiting import eventually


def _cut_the_issuers_connections(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (APPLICATION_NAME,),
        ).fetchall()
    return len(rows)


def test_cut_connections_give_a_503_with_retry_after_then_recover(tmp_path: Path) -> None:
    auth = auth_settings(dev=True).model_copy(update={"dev": DevAuthSettings(enabled=True)})
    with (
        scratch_schema() as (url, schema),
        secured_server(
            tmp_path, probe_catalog(), auth=auth, real_socket=True, database_url=url, database_schema=schema
        ) as server,
    ):
        token_request = {
            "grant_type": "refresh_token",
            "refresh_token": "unknown",
            "client_id": "aml-mcp-cli",
        }
        assert server.http.post("/oauth/token", data=token_request).status_code == 400
        assert _cut_the_issuers_connections(url) >= 1
        cut = server.http.post("/oauth/token", data=token_request)
        assert cut.status_code == 503, cut.text
        assert cut.headers["retry-after"] == "5"
        assert cut.json()["error"] == "temporarily_unavailable"

        def recovered() -> bool:
            answer = server.http.post("/oauth/token", data=token_request)
            return answer.status_code == 400 and answer.json()["error"] == "invalid_grant"

        eventually(recovered, timeout=15, what="the issuer answering again after its connections were cut")
        assert _cut_the_issuers_connections(url) >= 1
        jwks = server.http.get("/oauth/jwks.json")
        assert jwks.status_code in {200, 503}  # the keys' read may meet a dead connection too
        eventually(
            lambda: server.http.get("/oauth/jwks.json").status_code == 200,
            timeout=15,
            what="the JWKS served again",
        )


@pytest.mark.parametrize(
    "command",
    [
        ["token", "--subject", "alice", "--tenant", "meridian-bank"],
        ["devauth", "rotate-keys"],
        ["devauth", "client-secret"],
    ],
)
def test_a_command_on_an_unreachable_database_says_so_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    unreachable = "postgresql://aml:hunter2@127.0.0.1:1/aml"
    status = cli_main([*command, "--data-dir", str(tmp_path), "--database-url", unreachable])
    assert status == EXIT_DATA_DIR
    err = capsys.readouterr().err.strip()
    assert err.startswith("aml-mcp: the shared PostgreSQL database cannot be used:"), err
    assert "\n" not in err and "Traceback" not in err and "hunter2" not in err
