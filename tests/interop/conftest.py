"""One real `aml-mcp serve` (dev authorization server on, a small demo corpus) for every interop
test, and the Node clients installed."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.node_clients import NodeClients, node_clients
from tests.support.subprocess_server import ServerProcess

SMALL_DEMO = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40"}


@dataclass(frozen=True)
class Served:
    mcp_url: str
    port: int
    data_dir: Path


@pytest.fixture(scope="package")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    data_dir = tmp_path_factory.mktemp("interop")
    server = ServerProcess(["serve", "--data-dir", str(data_dir)], env=SMALL_DEMO).start(timeout=120)
    try:
        yield Served(f"{server.url}/mcp", server.port, data_dir)
    finally:
        server.__exit__(None, None, None)


@pytest.fixture(scope="package")
def clients() -> NodeClients:
    return node_clients()


def free_port() -> int:
    """A loopback port nobody listens on now (for a client that needs a fixed callback port)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def token(served: Served) -> str:
    """carol's token from the command the README's first call uses."""
    minted = subprocess.run(
        [
            sys.executable,
            "-m",
            "aml_mcp",
            "token",
            "--data-dir",
            str(served.data_dir),
            "--port",
            str(served.port),
            "--subject",
            "carol",
            "--tenant",
            "meridian-bank",
            "--client",
            "aml-mcp-cli",
            "--scope",
            "aml:read",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return minted.stdout.strip()
