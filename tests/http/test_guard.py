"""DNS-rebinding protection: a Host or Origin this server does not answer to is refused on every route."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.asgi import InProcessServer
from tests.support.mcp_http import headers_for, message


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"host": "evil.example.com"}, 421),
        ({"origin": "http://evil.example.com"}, 403),
        ({"host": "evil.example.com", "origin": "http://evil.example.com"}, 421),
    ],
)
def test_disallowed_host_or_origin_is_refused(
    core: httpx.Client, headers: dict[str, str], status: int
) -> None:
    body = message("server/discover")
    response = core.post("/mcp", content=json.dumps(body), headers={**headers_for(body), **headers})
    assert response.status_code == status
    assert response.json()["error"]["code"] == -32600
    health = core.get("/healthz", headers=headers)
    assert health.status_code == status


def test_loopback_origin_with_any_port_is_accepted(core: httpx.Client, core_server: InProcessServer) -> None:
    body = message("server/discover")
    for origin in (f"http://localhost:{core_server.port}", "http://127.0.0.1:1234"):
        response = core.post(
            "/mcp", content=json.dumps(body), headers={**headers_for(body), "origin": origin}
        )
        assert response.status_code == 200
