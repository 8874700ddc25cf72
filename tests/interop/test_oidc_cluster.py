"""oidc-provider as the issuer of a real cluster: `aml-mcp cluster` (HAProxy, two API replicas and a
worker on one PostgreSQL schema), every process told to trust the provider by the same settings.

A token the provider issued for the cluster's public URL works on every replica, asked directly,
and through the balancer; an opaque one is introspected by whichever replica gets it; a token for
another resource is refused by each. `aml-mcp call --login` signs in through the provider against
the balancer's URL and runs a task that a worker completes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from aml_mcp.cli.cluster import Cluster, running_cluster
from tests.interop.oidc_browser import browser_command
from tests.support.mcp_http import create, message, post, wait_for
from tests.support.oidc_provider import OPAQUE_CLIENT, OidcProvider
from tests.support.postgres import check_reachable, database_url

pytestmark = [pytest.mark.interop, pytest.mark.scaleout, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def provider() -> Iterator[OidcProvider]:
    with OidcProvider() as running:
        yield running


@pytest.fixture(scope="module")
def cluster(provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    url = database_url()
    check_reachable(url)
    env = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40", **provider.environment()}
    with running_cluster(
        replicas=2,
        workers=1,
        database_url=url,
        catalog="aml",
        work_dir=tmp_path_factory.mktemp("oidc-cluster"),
        env=env,
    ) as running:
        yield running


def _replica_clients(cluster: Cluster) -> list[httpx.Client]:
    return [httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) for port, _ in cluster.replicas]


def test_every_replica_trusts_the_provider_and_accepts_its_tokens(
    cluster: Cluster, provider: OidcProvider
) -> None:
    token = provider.client_credentials(cluster.url, scope="aml:read aml:eval").access_token
    opaque = provider.client_credentials(cluster.url, client=OPAQUE_CLIENT).access_token
    elsewhere = provider.client_credentials("http://127.0.0.1:9/other/mcp").access_token
    balancer = httpx.Client(base_url=cluster.url.removesuffix("/mcp"), timeout=30)
    replicas = _replica_clients(cluster)
    try:
        for http in replicas:
            metadata = http.get("/.well-known/oauth-protected-resource/mcp").json()
            assert metadata == {
                **metadata,
                "resource": cluster.url,
                "authorization_servers": [provider.issuer],
            }
            assert post(http, message("tools/list"), token=token).status_code == 200
            assert post(http, message("tools/list"), token=opaque).status_code == 200
            refused = post(http, message("tools/list"), token=elsewhere)
            assert (
                refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]
            )

        task = create(balancer, "run_full_eval", token=token)
        for http in replicas:  # any replica answers for the task, with the same token
            done = wait_for(http, task["taskId"], "completed", within=60, token=token)
            assert done["result"]["structuredContent"]["notes"] == 40
    finally:
        balancer.close()
        for http in replicas:
            http.close()


def test_cli_login_through_the_balancer_runs_a_task_to_completion(cluster: Cluster, tmp_path: Path) -> None:
    log = tmp_path / "browser.log"
    env = {k: v for k, v in os.environ.items() if k != "AML_MCP_TOKEN"}
    env |= {"BROWSER": browser_command(tmp_path), "LOGIN_LOG": str(log), "LOGIN_USER": "carol"}
    done = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "call", "run_full_eval", "--url", cluster.url, "--login",
         "--token-cache", str(tmp_path / "tokens.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert done.returncode == 0, (done.stderr, seen)
    assert json.loads(done.stdout)["notes"] == 40
    assert seen and seen[0]["request"]["resource"] == cluster.url
