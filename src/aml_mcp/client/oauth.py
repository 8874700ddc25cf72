"""OAuth 2.1 for the client: the SDK's `OAuthClientProvider` (discovery from the 401 challenge,
RFC 9728 resource metadata, RFC 8414 issuer check, PKCE, RFC 8707 `resource`, RFC 9207 `iss`,
client ID metadata documents or dynamic registration, refresh, and step-up on 403
`insufficient_scope`), with token storage on disk and the two ways an authorization code comes back.

Step-up re-authorizes for the scope the server's challenge names; as SEP-2350 asks, the scopes
already granted are kept in the request so escalating one operation does not lose the others.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import weakref
import webbrowser
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

TOKEN_FILE_MODE = 0o600
"""Token files are their owner's alone: they hold bearer credentials."""


class MemoryTokenStorage:
    """Tokens and client registration for one process."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        """`client_info`: a client registered with the authorization server beforehand, if any."""
        self._tokens: OAuthToken | None = None
        self._client = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self._tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info


class FileTokenStorage:
    """Tokens and client registration for one server, in one JSON file created with mode 0600.

    The file is replaced atomically (written beside it, then renamed), so a crash never leaves half
    a token; the directory is created 0700. Keyed by server URL so one file can serve several.
    """

    def __init__(self, path: Path, server_url: str) -> None:
        self.path = path
        self._key = server_url

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}
        return data if isinstance(data, dict) else {}

    def _entry(self) -> dict[str, Any]:
        entry = self._load().get(self._key)
        return entry if isinstance(entry, dict) else {}

    def _store(self, field: str, value: dict[str, Any]) -> None:
        data = self._load()
        entry = data.setdefault(self._key, {})
        entry[field] = value
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.{secrets.token_hex(6)}")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, TOKEN_FILE_MODE)
        with os.fdopen(descriptor, "w") as handle:
            json.dump(data, handle)
        os.replace(temporary, self.path)

    async def get_tokens(self) -> OAuthToken | None:
        raw = self._entry().get("tokens")
        return OAuthToken.model_validate(raw) if raw else None

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await anyio.to_thread.run_sync(
            self._store, "tokens", tokens.model_dump(mode="json", exclude_none=True)
        )

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        raw = self._entry().get("client")
        return OAuthClientInformationFull.model_validate(raw) if raw else None

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await anyio.to_thread.run_sync(
            self._store, "client", client_info.model_dump(mode="json", exclude_none=True)
        )


TokenStorage = MemoryTokenStorage | FileTokenStorage


class CodeCatcher:
    """Where the authorization code comes back: `redirect(url)` sends the user (or an automated
    agent) to the authorization URL, `callback()` returns the code from the redirect to
    `redirect_uri`. Subclasses decide how."""

    redirect_uri = "http://127.0.0.1:0/callback"

    async def redirect(self, authorization_url: str) -> None:
        raise NotImplementedError

    async def callback(self) -> AuthorizationCodeResult:
        raise NotImplementedError


class FollowRedirects(CodeCatcher):
    """For authorization servers that approve without a person (test and conformance servers): GET
    the authorization URL and read the code from the redirect's `Location`."""

    redirect_uri = "http://localhost:3000/callback"

    def __init__(self) -> None:
        self._result: AuthorizationCodeResult | None = None

    async def redirect(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(follow_redirects=False, timeout=30) as http:
            response = await http.get(authorization_url)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(
                f"the authorization server did not redirect back (HTTP {response.status_code})"
            )
        self._result = code_from_redirect(location)

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise RuntimeError("no authorization code was received")
        return result


def code_from_redirect(location: str) -> AuthorizationCodeResult:
    """The code, state and `iss` of an authorization response; an error response raises."""
    query = parse_qs(urlsplit(location).query)
    if "error" in query:
        raise RuntimeError(f"authorization refused: {query['error'][0]}")
    if "code" not in query:
        raise RuntimeError("the authorization response carries no code")
    return AuthorizationCodeResult(
        code=query["code"][0],
        state=query.get("state", [None])[0],
        iss=query.get("iss", [None])[0],
    )


def oauth_provider(
    server_url: str,
    *,
    storage: TokenStorage,
    catcher: CodeCatcher,
    client_name: str = "aml-mcp client",
    client_metadata_url: str | None = None,
    scope: str | None = None,
    redirect_uri: str | None = None,
    validate_resource_url: Callable[[str, str | None], Awaitable[None]] | None = None,
) -> OAuthClientProvider:
    """The SDK's provider for `server_url`: pass it as `McpClient(url, auth=...)`.

    `client_metadata_url` (an https URL of this client's metadata document) is used as the client
    id when the authorization server supports client ID metadata documents; otherwise the client
    registers dynamically. `scope` is only a starting point: the challenge's scope wins.
    """
    metadata = OAuthClientMetadata(
        client_name=client_name,
        redirect_uris=[AnyUrl(redirect_uri or catcher.redirect_uri)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",  # noqa: S106 - a public client (PKCE), no secret
        scope=scope,
    )
    return OAuthClientProvider(
        server_url=server_url,
        client_metadata=metadata,
        storage=storage,
        redirect_handler=catcher.redirect,
        callback_handler=catcher.callback,
        client_metadata_url=client_metadata_url,
        validate_resource_url=validate_resource_url,
    )


class LoopbackCatcher(CodeCatcher):
    """For a person at this machine (RFC 8252): the authorization URL opens in their browser (and is
    printed), and the redirect comes back to a one-shot listener on 127.0.0.1 at a port the system
    chose, bound before the URL is built so no other process can take it."""

    def __init__(
        self,
        *,
        open_browser: Callable[[str], object] | None = None,
        show: Callable[[str], None] | None = None,
        timeout_seconds: float = 300.0,
    ) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(1)
        self._socket.settimeout(timeout_seconds)
        self.redirect_uri = f"http://127.0.0.1:{self._socket.getsockname()[1]}/callback"
        self._open_browser = open_browser if open_browser is not None else webbrowser.open
        self._show = show if show is not None else (lambda text: print(text, file=sys.stderr, flush=True))
        weakref.finalize(self, self._socket.close)

    async def redirect(self, authorization_url: str) -> None:
        self._show(f"Sign in to authorize this client:\n  {authorization_url}")
        self._open_browser(authorization_url)

    async def callback(self) -> AuthorizationCodeResult:
        # The listener stays open: a step-up later in the same run comes back to the same URI.
        return await anyio.to_thread.run_sync(self._accept_one, abandon_on_cancel=True)

    def close(self) -> None:
        self._socket.close()

    def _accept_one(self) -> AuthorizationCodeResult:
        while True:
            connection, _ = self._socket.accept()
            with connection:
                connection.settimeout(10)
                request_line = connection.recv(8192).split(b"\r\n", 1)[0].decode("latin-1")
                parts = request_line.split(" ")
                if len(parts) < 2 or not parts[1].startswith("/callback"):
                    connection.sendall(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    )
                    continue
                body = b"<!doctype html><title>Signed in</title><p>You can close this window."
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n"
                    + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                    + body
                )
                return code_from_redirect(parts[1])
