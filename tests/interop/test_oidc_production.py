"""`deploy/production.toml` is served as written: `aml-mcp serve --config deploy/production.toml`
accepts it for its public URL, with oidc-provider as the trusted issuer and PostgreSQL for state.

Only what a test machine cannot be is overridden, in the environment as an operator would: the
issuer (the test provider instead of the bank's), the database (a private schema of the test
PostgreSQL) and, as flags, the bind address (loopback) and the data directory.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict

from aml_mcp.config import load_settings
from tests.support.mcp_http import message, post
from tests.support.oidc_provider import OidcProvider
from tests.support.postgres import scratch_schema
from tests.support.subprocess_server import ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(180)]

PRODUCTION = Path(__file__).resolve().parents[2] / "deploy" / "production.toml"


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider() as running:
        yield running


def test_the_production_file_turns_off_everything_for_loopback_only() -> None:
    written = tomllib.loads(PRODUCTION.read_text())
    settings = load_settings(PRODUCTION)
    assert settings.public_url == written["public_url"] == "https://aml.bank.example/mcp"
    assert settings.exposed_at is not None
    assert not settings.auth.dev.enabled and not settings.lab_served and not settings.simulation_served
    assert settings.auth.enabled and [i.issuer for i in settings.auth.issuers] == [
        "https://login.bank.example/realms/aml"
    ]
    assert settings.database_url is not None and settings.aml.demo_notes_per_tenant == 0
    assert conninfo_to_dict(settings.database_url).get("password") is None  # PGPASSWORD or ~/.pgpass


def test_serve_accepts_the_production_file_on_its_public_url(provider: OidcProvider, tmp_path: Path) -> None:
    public_url = load_settings(PRODUCTION).public_url
    assert public_url is not None
    host = httpx.URL(public_url).host
    with scratch_schema() as (url, schema):
        env = {
            "AML_MCP_AUTH__ISSUERS": json.dumps([{"issuer": provider.issuer}]),
            "AML_MCP_DATABASE_URL": url,
            "AML_MCP_DATABASE_SCHEMA": schema,
        }
        args = [
            "serve",
            "--config",
            str(PRODUCTION),
            "--host",
            "127.0.0.1",
            "--data-dir",
            str(tmp_path / "d"),
        ]
        server = ServerProcess(args, env=env).start(timeout=120)
        try:
            public = {"Host": host}
            with httpx.Client(base_url=server.url, timeout=15, headers=public) as http:
                assert http.get("/readyz").json() == {"status": "ready"}
                metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
                assert metadata["resource"] == public_url
                assert metadata["authorization_servers"] == [provider.issuer]
                for path in ("/.well-known/oauth-authorization-server/oauth", "/oauth/authorize", "/lab"):
                    assert http.get(path).status_code == 404, path
                assert post(http, message("tools/list"), host=host).status_code == 401
                token = provider.client_credentials(public_url).access_token
                listed = post(http, message("tools/list"), token=token, host=host)
                assert listed.status_code == 200, listed.text
                assert "search_aml_notes" in listed.text
                body = message("tools/call", {"name": "search_aml_notes", "arguments": {"query": "cash"}})
                found = post(http, body, token=token, host=host)
                assert (
                    found.status_code == 200 and found.json()["result"]["structuredContent"]["results"] == []
                )
            server.terminate()
            assert server.wait(30) == 0
        finally:
            server.__exit__(None, None, None)
