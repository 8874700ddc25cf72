"""A scope rule that cannot decide (its store is unavailable) never lets the request through: the gate
answers the rule's own JSON-RPC error — retryable, with a hint and `Retry-After` — as a 503, and
audits the refusal; a storage fault the rule lets through (D10: `subscriptions/listen` right after a
connection reset was answered 500) is the same retryable 503; any other fault in a rule is a
JSON-RPC 500, also audited."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.requests import Request
from starlette.responses import Response

from aml_mcp.audit import AuditEvent
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.wiring import Auth, LocalIssuer, build_auth
from aml_mcp.config import AuthSettings
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.wiring import build_dev_auth
from aml_mcp.persistence import LocalPersistence
from aml_mcp.principal import Principal
from aml_mcp.protocol.errors import storage_unavailable
from aml_mcp.scope_rules import ScopeRules
from aml_mcp.tasks.storage import StorageUnavailable

RESOURCE = "http://127.0.0.1:8000/mcp"


async def _store_down(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
    raise storage_unavailable("database is locked", retry_after_ms=1500)


async def _broken(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
    raise RuntimeError("a bug in a rule")


async def _connection_lost(params: Mapping[str, Any], principal: Principal) -> frozenset[str]:
    """What the listen rule let through right after a reset (D10): the store's own fault, raised
    from the driver's, never turned into a JSON-RPC error by the rule."""
    raise StorageUnavailable("database unreachable") from psycopg.OperationalError(
        "server closed the connection"
    )


def _request(token: str) -> Request:
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {token}".encode())]
    return Request(
        {"type": "http", "method": "POST", "path": "/mcp", "query_string": b"", "headers": headers}
    )


async def _gate(tmp_path: Path, recorded: list[AuditEvent]) -> tuple[Auth, str, LocalPersistence]:
    hierarchy = ScopeHierarchy({})
    local = LocalPersistence(tmp_path)
    state = local.devauth(replay_memory_seconds=86_400)
    dev = build_dev_auth(
        DevAuthSettings(),
        store=state.store,
        keys=state.keys,
        secrets=local.secrets(),
        resource_url=RESOURCE,
        tenant_claim="tenant",
        hierarchy=hierarchy,
    )
    auth = build_auth(
        AuthSettings(),
        resource_url=RESOURCE,
        revocation_store=local.revocations(),
        audit=recorded.append,
        scope_rules=ScopeRules(
            {"tasks/get": _store_down, "tasks/cancel": _broken, "subscriptions/listen": _connection_lost}
        ),
        hierarchy=hierarchy,
        default_scopes=frozenset,
        local_issuers=[LocalIssuer(dev.issuer, dev.fetch_jwks)],
    )
    token = dev.minter.mint(subject="alice", tenant="bank-a", client_id="c", scopes=["aml:read"]).token
    return auth, token, local


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def _admit(auth: Auth, token: str, method: str) -> Response:
    message = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {"taskId": "t-1"}}
    verdict = await auth.admission.admit(_request(token), message)
    assert isinstance(verdict, Response)
    return verdict


@pytest.mark.anyio
async def test_an_unavailable_store_is_a_retryable_503_and_audited(tmp_path: Path) -> None:
    recorded: list[AuditEvent] = []
    auth, token, local = await _gate(tmp_path, recorded)
    async with local.running(), auth.running():
        response = await _admit(auth, token, "tasks/get")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "2"
        body = json.loads(bytes(response.body))
        assert body["id"] == 7
        assert body["error"]["code"] == -32010
        assert body["error"]["data"]["retryable"] is True
        assert recorded[-1].reason == "scope_check_unavailable" and recorded[-1].subject == "alice"

        response = await _admit(auth, token, "tasks/cancel")
        assert response.status_code == 500
        assert json.loads(bytes(response.body))["error"]["code"] == -32603
        assert recorded[-1].reason == "scope_check_failed"


@pytest.mark.anyio
async def test_a_storage_fault_a_rule_lets_through_is_the_retryable_503_not_a_500(tmp_path: Path) -> None:
    recorded: list[AuditEvent] = []
    auth, token, local = await _gate(tmp_path, recorded)
    async with local.running(), auth.running():
        response = await _admit(auth, token, "subscriptions/listen")
        assert response.status_code == 503
        assert response.headers["retry-after"] == "1" and response.headers["cache-control"] == "no-store"
        error = json.loads(bytes(response.body))["error"]
        assert error["code"] == -32010 and "database unreachable" in error["message"]
        assert error["data"] == {"reason": "storage_unavailable", "retryable": True, "retryAfterMs": 1000}
        assert recorded[-1].reason == "scope_check_unavailable" and recorded[-1].subject == "alice"
