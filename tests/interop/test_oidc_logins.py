"""Clients that log in to aml-mcp through oidc-provider, a third-party authorization server.

`aml-mcp call --login`, the official Python SDK and the TypeScript SDK client each start from
aml-mcp's 401: the protected resource metadata names the provider, whose metadata gives the
endpoints; they register dynamically (or use the pre-registered public client), send the user to
sign in with PKCE and the RFC 8707 `resource`, check the RFC 9207 `iss` of the answer, and call
tools with the provider's token. The person at the browser is played headlessly
(`tests/interop/oidc_browser.py`, `tests/support/oidc_provider.py`, `tests/interop/oidc/sign-in.mjs`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx2
import jwt
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyUrl

from tests.interop.oidc_browser import browser_command
from tests.support.node_clients import NodeClients
from tests.support.oidc_provider import CLI_CLIENT_ID, OidcProvider, serve_trusting, sign_in
from tests.support.sdk_oauth import MemoryStorage
from tests.support.subprocess_server import ServerProcess

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(300)]

REDIRECT_URI = "http://127.0.0.1:9/callback"  # never listened on: the Python SDK test reads the redirect


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider() as running:
        yield running


@pytest.fixture(scope="module")
def server(provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with serve_trusting(provider, tmp_path_factory.mktemp("oidc-logins")) as running:
        yield running


# -- aml-mcp call --login -----------------------------------------------------------------------------


def _cli(
    server: ServerProcess,
    tmp_path: Path,
    tool: str,
    *args: str,
    grant: str | None = None,
    forge_iss: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    log = tmp_path / "browser.log"
    env = {k: v for k, v in os.environ.items() if k != "AML_MCP_TOKEN"}
    env |= {"BROWSER": browser_command(tmp_path), "LOGIN_LOG": str(log), "LOGIN_USER": "carol"}
    if grant:
        env["LOGIN_GRANT"] = grant
    if forge_iss:
        env["LOGIN_FORGE_ISS"] = forge_iss
    done = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "call", tool, "--url", f"{server.url}/mcp", "--login",
         "--token-cache", str(tmp_path / "tokens.json"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return done, seen


def _cached_token(tmp_path: Path) -> dict[str, Any]:
    (entry,) = json.loads((tmp_path / "tokens.json").read_text()).values()
    return dict(entry)


def test_cli_login_through_the_provider_then_a_task_after_a_step_up(
    server: ServerProcess, provider: OidcProvider, tmp_path: Path
) -> None:
    resource = f"{server.url}/mcp"
    # carol may have aml:read, aml:eval and aml:draft; at the consent page she grants aml:read only.
    done, seen = _cli(
        server, tmp_path, "search_aml_notes", "--arg", "query=cash structuring", grant="aml:read"
    )
    assert done.returncode == 0, (done.stderr, seen)
    assert json.loads(done.stdout)["results"], done.stdout
    (first,) = seen
    request = first["request"]
    assert request["client_id"] != CLI_CLIENT_ID  # registered dynamically at the provider
    assert request["resource"] == resource and request["code_challenge_method"] == "S256"
    # The client asks for what the resource metadata lists (and offline_access: the provider offers it).
    assert set(request["scope"].split()) == {"aml:read", "aml:eval", "aml:draft", "offline_access"}
    assert request["redirect_uri"].startswith("http://127.0.0.1:") and first["iss"] == provider.issuer
    cached = _cached_token(tmp_path)
    claims = jwt.decode(cached["tokens"]["access_token"], options={"verify_signature": False})
    assert (claims["iss"], claims["aud"], claims["scope"]) == (provider.issuer, resource, "aml:read")
    assert cached["client"]["client_id"] == request["client_id"] and "refresh_token" in cached["tokens"]

    # run_full_eval needs aml:eval, which the cached token lacks: 403, a step-up sign-in asking for
    # both scopes (the one granted is kept), then the task runs to completion.
    done, seen = _cli(server, tmp_path, "run_full_eval")
    assert done.returncode == 0, (done.stderr, seen)
    result = json.loads(done.stdout)
    assert result["cases"] > 0 and result["notes"] == 40
    step_up = seen[-1]["request"]
    assert set(step_up["scope"].split()) - {"offline_access"} == {"aml:read", "aml:eval"}
    assert step_up["client_id"] == request["client_id"] and step_up["resource"] == resource
    claims = jwt.decode(
        _cached_token(tmp_path)["tokens"]["access_token"], options={"verify_signature": False}
    )
    assert set(claims["scope"].split()) == {"aml:read", "aml:eval"}


def test_cli_login_refuses_an_authorization_response_naming_another_issuer(
    server: ServerProcess, tmp_path: Path
) -> None:
    """RFC 9207: the provider says `iss` in every authorization response and its metadata says it
    does; an answer carrying another issuer (a mix-up) must end the sign-in, with no token kept."""
    done, seen = _cli(
        server, tmp_path, "search_aml_notes", "--json", '{"query": "cash"}', forge_iss="http://127.0.0.1:1"
    )
    assert done.returncode != 0, done.stdout
    assert seen and seen[0]["delivered"] == 200  # the forged answer did reach the CLI
    assert "iss mismatch: http://127.0.0.1:1 != " in done.stderr, done.stderr
    tokens = tmp_path / "tokens.json"
    assert not tokens.exists() or "access_token" not in tokens.read_text()


# -- the official Python SDK ----------------------------------------------------------------------------


class _Browser:
    """The SDK's redirect and callback handlers: sign in at the provider, hand back the redirect."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.visits: list[str] = []
        self._location = ""

    async def redirect(self, authorization_url: str) -> None:
        import anyio

        self.visits.append(authorization_url)
        self._location = await anyio.to_thread.run_sync(sign_in, authorization_url, self.username)

    async def callback(self) -> AuthorizationCodeResult:
        answer = {k: v[0] for k, v in parse_qs(urlsplit(self._location).query).items()}
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))


@pytest.mark.anyio
@pytest.mark.parametrize("login", ["dynamic registration", "pre-registered"])
async def test_the_python_sdk_logs_in_through_the_provider(
    login: str, server: ServerProcess, provider: OidcProvider
) -> None:
    resource = f"{server.url}/mcp"
    pre_registered = login == "pre-registered"
    storage = MemoryStorage(
        OAuthClientInformationFull(
            client_id=CLI_CLIENT_ID,
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            token_endpoint_auth_method="none",
            grant_types=["authorization_code", "refresh_token"],
        )
        if pre_registered
        else None
    )
    browser = _Browser("carol")
    auth = OAuthClientProvider(
        server_url=resource,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            client_name="python sdk interop test",
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )
    async with (
        httpx2.AsyncClient(auth=auth, timeout=60) as http,
        Client(streamable_http_client(resource, http_client=http), mode="2026-07-28") as client,
    ):
        listed = {tool.name for tool in (await client.list_tools()).tools}
        assert {"search_aml_notes", "run_full_eval", "draft_sar_batch"} <= listed
        found = await client.call_tool("search_aml_notes", {"query": "cash structuring", "top_k": 3})
        assert not found.is_error, found
        assert found.structured_content is not None and found.structured_content["results"]
        assert all(hit["case_id"].startswith("MRD-") for hit in found.structured_content["results"])

    assert storage.client_info is not None and storage.tokens is not None
    assert (storage.client_info.client_id == CLI_CLIENT_ID) == pre_registered
    first = parse_qs(urlsplit(browser.visits[0]).query)
    assert urlsplit(browser.visits[0]).netloc == urlsplit(provider.issuer).netloc
    assert first["resource"] == [resource] and first["code_challenge_method"] == ["S256"]
    claims = jwt.decode(storage.tokens.access_token, options={"verify_signature": False})
    assert (claims["iss"], claims["aud"], claims["org"]) == (
        provider.issuer,
        resource,
        {"bank": "meridian-bank"},
    )


# -- the TypeScript SDK ---------------------------------------------------------------------------------


def _steps(output: str) -> dict[str, dict[str, Any]]:
    steps = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    return {step.pop("step"): step for step in steps}


@pytest.mark.parametrize("login", ["dcr", "preregistered"])
def test_the_typescript_sdk_logs_in_through_the_provider_and_runs_tasks(
    clients: NodeClients, server: ServerProcess, provider: OidcProvider, login: str
) -> None:
    run = subprocess.run(
        [*clients.script("ts-client.mjs"), "--url", f"{server.url}/mcp", "--login", login,
         "--idp", "oidc-provider"],
        cwd=clients.project,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )  # fmt: skip
    steps = _steps(run.stdout)
    assert run.returncode == 0 and "error" not in steps, run.stdout + run.stderr
    signed_in = steps["login"]
    assert signed_in["protocolVersion"] == "2026-07-28"
    assert signed_in["authorizationUrl"].startswith(f"{provider.issuer}/auth?")
    if login == "dcr":
        assert signed_in["registered"]["client_id"] != CLI_CLIENT_ID
    else:
        assert signed_in["registered"] is None and signed_in["clientId"] == CLI_CLIENT_ID
    search = steps["search_aml_notes"]
    assert not search["isError"] and "MRD-" in search["text"] and "HBT-" not in search["text"]
    assert steps["run_full_eval"]["status"] == "completed"
    draft = steps["draft_sar_batch"]
    assert draft["status"] == "completed" and "input_required" in draft["statuses"]
    assert steps["listen"]["seen"][-1]["status"] == "completed"
