"""Client ID Metadata Documents: an https client id is fetched, checked against its own URL, and cached."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.wiring import build_dev_auth
from aml_mcp.persistence import LocalPersistence

CLIENT_ID = "https://app.example/oauth/client.json"


def _server(tmp_path: Path, documents: dict[str, Any], fetched: list[str]) -> Any:
    def fetch(url: str) -> Mapping[str, Any]:
        fetched.append(url)
        if url not in documents:
            raise LookupError(url)
        return dict(documents[url])

    local = LocalPersistence(tmp_path)
    state = local.devauth(replay_memory_seconds=86_400)
    dev = build_dev_auth(
        DevAuthSettings(),
        store=state.store,
        keys=state.keys,
        secrets=local.secrets(),
        resource_url="http://127.0.0.1:8000/mcp",
        tenant_claim="tenant",
        hierarchy=ScopeHierarchy({}),
        fetch_client_metadata=fetch,
    )
    return dev.server


def _document(**overrides: Any) -> dict[str, Any]:
    return {
        "client_id": CLIENT_ID,
        "client_name": "Example MCP Client",
        "redirect_uris": ["http://127.0.0.1:3000/callback", "https://app.example/callback"],
        "token_endpoint_auth_method": "none",
        **overrides,
    }


def test_a_valid_document_makes_a_public_client_and_is_cached(tmp_path: Path) -> None:
    fetched: list[str] = []
    server = _server(tmp_path, {CLIENT_ID: _document()}, fetched)
    client = server.query_client(CLIENT_ID)
    assert client is not None and client.client_name == "Example MCP Client"
    assert client.token_endpoint_auth_method == "none"
    assert client.check_redirect_uri("http://127.0.0.1:3000/callback")
    assert not client.check_redirect_uri("http://127.0.0.1:3000/other")
    assert server.query_client(CLIENT_ID) is client and fetched == [CLIENT_ID]
    assert server.metadata()["client_id_metadata_document_supported"] is True


def test_documents_that_do_not_vouch_for_themselves_are_refused(tmp_path: Path) -> None:
    bad = {
        CLIENT_ID: _document(client_id="https://other.example/client.json"),
        CLIENT_ID + "?2": _document(client_id=CLIENT_ID + "?2", redirect_uris=["http://evil.example/cb"]),
        CLIENT_ID + "?3": _document(
            client_id=CLIENT_ID + "?3", token_endpoint_auth_method="client_secret_post"
        ),
        CLIENT_ID + "?4": _document(client_id=CLIENT_ID + "?4", redirect_uris=[]),
    }
    server = _server(tmp_path, bad, [])
    for client_id in [*bad, "https://app.example/missing.json"]:
        assert server.query_client(client_id) is None
