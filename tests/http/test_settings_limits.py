"""The `http` settings group and the per-caller listen limit: defaults, environment, bounds."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from aml_mcp.config import load_settings
from aml_mcp.http.protocol import BoundedHttpToolsProtocol, uvicorn_options


def test_defaults_bound_every_client() -> None:
    settings = load_settings()
    limits = settings.http
    assert (limits.max_header_count, limits.max_header_bytes, limits.max_json_depth) == (100, 32 * 1024, 64)
    assert limits.request_read_timeout_seconds == 30.0 and limits.max_connections == 768
    assert settings.max_listen_streams_per_principal == 16


def test_the_environment_sets_them_as_for_every_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AML_MCP_HTTP__MAX_HEADER_COUNT", "50")
    monkeypatch.setenv("AML_MCP_HTTP__REQUEST_READ_TIMEOUT_SECONDS", "2.5")
    monkeypatch.setenv("AML_MCP_MAX_LISTEN_STREAMS_PER_PRINCIPAL", "4")
    settings = load_settings()
    assert settings.http.max_header_count == 50
    assert settings.http.request_read_timeout_seconds == 2.5
    assert settings.max_listen_streams_per_principal == 4


@pytest.mark.parametrize(
    "http",
    [
        {"max_header_count": 0},
        {"max_header_bytes": 100},
        {"max_json_depth": 2},
        {"request_read_timeout_seconds": 0},
        {"max_connections": 0},
        {"no_such_limit": 1},
    ],
)
def test_limits_that_would_disable_the_server_or_the_bound_are_refused(http: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        load_settings(http=http)


def test_the_served_protocol_carries_the_configured_limits() -> None:
    options = uvicorn_options(load_settings(http={"max_header_bytes": 8192, "max_connections": 7}).http)
    protocol = options["http"]
    assert issubclass(protocol, BoundedHttpToolsProtocol)
    assert protocol.max_head_bytes == 8192 and protocol.read_timeout == 30.0
    assert options["limit_concurrency"] == 7 and options["ws"] == "none"
