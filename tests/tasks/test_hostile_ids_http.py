"""N8 over HTTP: a task id holding NUL is "Task not found" on SQLite and on PostgreSQL alike.

JSON carries NUL as `\\u0000`, and the `Mcp-Name` header carries it base64-wrapped, so a client can
send `tasks/get` for such an id. The HTTP edge lets it through (it is valid Unicode), and so did
the handlers: on PostgreSQL the lookup then failed on the value (`psycopg.DataError`) instead of
missing it. Both servers here are real (uvicorn on a socket); the answer must be the one unknown,
foreign and expired ids get, with no traceback in the log.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from mcp.shared.inbound import encode_header_value

from aml_mcp.conformance.fixtures import fixture_catalog
from tests.support.mcp_http import WITH_TASKS, create, headers_for, message
from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.postgres import BACKENDS, backend_settings

METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


@pytest.fixture(scope="module", params=BACKENDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer
) -> Iterator[SecuredServer]:
    with (
        backend_settings(request.param) as backend,
        secured_server(
            tmp_path_factory.mktemp(f"hostile-ids-{request.param}"),
            fixture_catalog(),
            issuer=issuer,
            real_socket=True,
            **backend,
        ) as running,
    ):
        yield running


@pytest.fixture(scope="module")
def token(server: SecuredServer) -> str:
    return server.mint(subject="erin", scope="aml:read")


@pytest.fixture(scope="module")
def real_task(server: SecuredServer, token: str) -> str:
    """A task erin owns, so a hostile id built from it has a neighbour to not find."""
    task_id: str = create(server.http, "slow_compute", {"seconds": 30, "label": "kept"}, token=token)[
        "taskId"
    ]
    return task_id


def call(server: SecuredServer, token: str, method: str, task_id: str) -> Any:
    params: dict[str, Any] = {"taskId": task_id}
    if method == "tasks/update":
        params["inputResponses"] = {}
    body = message(method, params, capabilities=WITH_TASKS)
    headers = {
        **headers_for(body, mcp_name=encode_header_value(task_id)),
        "authorization": f"Bearer {token}",
    }
    return server.http.post("/mcp", content=json.dumps(body), headers=headers)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("shape", ["nul", "nul-inside", "after-a-real-id"])
def test_a_task_id_holding_nul_is_not_found(
    server: SecuredServer,
    token: str,
    real_task: str,
    method: str,
    shape: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    task_id = {"nul": "\u0000", "nul-inside": "ab\u0000cd", "after-a-real-id": real_task + "\u0000"}[shape]
    mark = server.audit_mark()
    with caplog.at_level(logging.ERROR):
        response = call(server, token, method, task_id)
    assert response.status_code < 500, response.text
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (-32602, "Task not found")
    assert server.wait_for_audit(since=mark, reason="not_found")["method"] == method
    assert not [record for record in caplog.records if record.exc_info], "no traceback in the log"


def test_the_real_task_is_still_there(server: SecuredServer, token: str, real_task: str) -> None:
    response = call(server, token, "tasks/get", real_task)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["taskId"] == real_task
