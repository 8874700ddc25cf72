"""The official conformance suite, 50/50, against a server whose only trusted issuer is oidc-provider.

`aml-mcp conformance-server --config FILE` serves the fixtures with authentication on, trusting the
provider by settings alone (the development authorization server off), behind a gateway on its
public URL. The suite sends no credentials of its own, so the gateway (HAProxy, as a bank's API
gateway would) adds the service token the provider issued for that URL (client credentials, RFC 8707
`resource`) to every request: each of the suite's requests is verified by aml-mcp against the
provider's keys. The suite's authorization-server scenarios are run against the development server
by `scripts/run-authorization-conformance.sh`, unchanged.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.interop.conftest import free_port
from tests.support.mcp_http import message, post
from tests.support.oauth import audit_events
from tests.support.oidc_provider import OidcProvider
from tests.support.subprocess_server import ServerProcess
from tests.support.waiting import eventually

pytestmark = [pytest.mark.interop, pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]

GATEWAY = """\
global
    maxconn 1024
    log stdout format raw local0 warning

defaults
    mode http
    option http-no-delay
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    timeout http-request 10s
    timeout tunnel 1h

frontend gateway
    bind 127.0.0.1:{port}
    http-request set-header Authorization "Bearer {token}"
    default_backend aml_mcp

backend aml_mcp
    server conformance 127.0.0.1:{server_port}
"""


def _suite() -> Path:
    for shared in (os.environ.get("AML_MCP_SHARED"), str(ROOT.parent / "shared"), "/work/shared"):
        if shared and (Path(shared) / "conformance" / "run-server-suite.sh").is_file():
            return Path(shared) / "conformance" / "run-server-suite.sh"
    raise RuntimeError("the conformance suite (shared/conformance/run-server-suite.sh) was not found")


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider(access_token_ttl=3600) as running:
        yield running


def _config(provider: OidcProvider, public_url: str, path: Path) -> Path:
    path.write_text(
        f'public_url = "{public_url}"\n\n'
        "[auth]\n"
        'tenant_claim = "org.bank"\n'
        'subject_claim = "preferred_username"\n'
        f'issuers = [{{ issuer = "{provider.issuer}" }}]\n\n'
        "[auth.dev]\n"
        "enabled = false\n"
    )
    return path


def test_conformance_is_50_of_50_with_oidc_provider_the_only_trusted_issuer(
    provider: OidcProvider, tmp_path: Path
) -> None:
    haproxy = shutil.which("haproxy")
    assert haproxy, "HAProxy is needed (Debian: apt-get install haproxy; .ci/run installs it)"
    gateway_port = free_port()
    public_url = f"http://127.0.0.1:{gateway_port}/mcp"
    config = _config(provider, public_url, tmp_path / "aml.toml")
    data_dir = tmp_path / "data"
    server = ServerProcess(["conformance-server", "--config", str(config), "--data-dir", str(data_dir)])
    server.start(timeout=60)
    gateway: subprocess.Popen[bytes] | None = None
    try:
        with httpx.Client(base_url=server.url, timeout=10) as http:
            metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
            assert metadata["authorization_servers"] == [provider.issuer]
            assert metadata["resource"] == public_url
            assert post(http, message("server/discover")).status_code == 401  # no token, no answer

        token = provider.client_credentials(public_url).access_token
        cfg = tmp_path / "gateway.cfg"
        cfg.write_text(GATEWAY.format(port=gateway_port, token=token, server_port=server.port))
        cfg.chmod(0o600)
        gateway = subprocess.Popen(
            [haproxy, "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        eventually(
            lambda: _answers(f"http://127.0.0.1:{gateway_port}/readyz"),
            timeout=15,
            interval=0.1,
            what="the gateway",
        )

        run = subprocess.run(
            ["bash", str(_suite()), public_url],
            capture_output=True,
            text=True,
            timeout=800,
            check=False,
        )
        summary = run.stdout
        assert "conformance: 50 passed, 0 failed" in summary.splitlines(), summary + run.stderr[-3000:]
        allowed = audit_events(data_dir, decision="allow", issuer=provider.issuer)
        assert len(allowed) > 50 and {event["tenant"] for event in allowed} == {"meridian-bank"}
        assert not audit_events(data_dir, decision="deny", reason="wrong_issuer")
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(10)
        server.__exit__(None, None, None)


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
