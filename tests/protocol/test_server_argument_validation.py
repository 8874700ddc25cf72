"""Arguments the schema validator itself cannot handle are a tool error, never -32603 (L2, F11).

The validator gives up on arguments nested a few hundred levels deep (`Recursion limit reached`).
The HTTP edge refuses such bodies by default (`http.max_json_depth`), so this server raises that
limit to let one through to the validator, as a deployment that raised it would: the caller still
gets `isError` naming the problem, and the log gets one line, no traceback.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from aml_mcp.app import build_app
from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.live_server import LiveServer
from tests.support.mcp_http import headers_for, message
from tests.support.settings import open_settings


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._lock:
            self.records.append(record)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = open_settings(tmp_path_factory.mktemp("argument-validation"), http={"max_json_depth": 512})
    with LiveServer(build_app(settings, catalog=fixture_catalog())) as live:
        yield live


def _deep(levels: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    node = root
    for _ in range(levels - 1):
        node["a"] = {}
        node = node["a"]
    return root


@pytest.mark.parametrize("tool", ["json_schema_2020_12_tool", "slow_compute"])
def test_arguments_too_deep_for_the_validator_are_a_tool_error(server: LiveServer, tool: str) -> None:
    records = _Records()
    watched = [logging.getLogger(), logging.getLogger("uvicorn.error")]
    for logger in watched:
        logger.addHandler(records)
    try:
        body = message("tools/call", {"name": tool, "arguments": {"extra": _deep(300)}})
        response = httpx.post(
            f"{server.url}/mcp", content=json.dumps(body), headers=headers_for(body), timeout=15
        )
    finally:
        for logger in watched:
            logger.removeHandler(records)
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["isError"] is True
    assert "could not be validated" in result["content"][0]["text"]
    assert [r for r in records.records if r.exc_info is not None or r.levelno >= logging.ERROR] == []
