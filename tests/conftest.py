"""Fixtures every test package shares."""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.asgi import InProcessServer
from tests.support.live_server import LiveServer
from tests.support.oauth import TestIssuer
from tests.support.settings import open_settings


@pytest.fixture(scope="session", autouse=True)
def static_dense_half() -> Iterator[None]:
    """Servers built by tests embed with the static table unless a test asks for the transformer
    (`aml={"embedder": "minilm"}`): it loads in milliseconds and embeds thousands of notes a
    second, so tests that do not care about ranking quality stay fast. Child server processes
    inherit it. The transformer's own tests and a few end-to-end ones set it explicitly."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AML_MCP_AML__EMBEDDER", os.environ.get("AML_MCP_AML__EMBEDDER", "static"))
        yield


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def issuer() -> Iterator[TestIssuer]:
    """A token issuer over real HTTP, shared by the session.

    Tests may add and rotate keys (old ones stay published) and count its requests as differences;
    each module's server fetches the issuer's metadata and keys afresh.
    """
    with TestIssuer() as running:
        yield running


@pytest.fixture(scope="module")
def core_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessServer]:
    """The conformance fixture catalog with authentication off and a 64 KiB body limit, in-process."""
    settings = open_settings(tmp_path_factory.mktemp("core"), max_body_bytes=64 * 1024)
    with InProcessServer(build_app(settings, catalog=fixture_catalog())) as served:
        yield served


@pytest.fixture
def core(core_server: InProcessServer) -> Iterator[httpx.Client]:
    """A client of `core_server`."""
    with core_server.client(timeout=10) as http:
        yield http


@pytest.fixture(scope="module")
def core_tcp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """A client of the same server over a real socket (uvicorn on 127.0.0.1), for what only a real
    HTTP parser, real framing or a real stream shows."""
    settings = open_settings(tmp_path_factory.mktemp("core-tcp"), max_body_bytes=64 * 1024)
    with (
        LiveServer(build_app(settings, catalog=fixture_catalog())) as live,
        httpx.Client(base_url=live.url, timeout=10) as http,
    ):
        yield http
