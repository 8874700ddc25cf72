"""OAuth 2.1 for the client: the SDK's `OAuthClientProvider` (discovery from the 401 challenge,
RFC 9728 resource metadata, RFC 8414 issuer check, PKCE, RFC 8707 `resource`, RFC 9207 `iss`,
client ID metadata documents or dynamic registration, refresh, and step-up on 403
`insufficient_scope`), with token storage on disk and the two ways an authorization code comes back.

Step-up re-authorizes for the scope the server's challenge names; as SEP-2350 asks, the scopes
already granted are kept in the request so escalating one operation does not lose the others.

An authorization response is only taken from whoever knows the `state` of the request this client
sent: the loopback listener is reachable by every local process (and by any web page that guesses
its port), so a callback with another state or none — a code or an `error` — is ignored, never
an end to the sign-in.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import weakref
import webbrowser
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.abc
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from aml_mcp.client.terminal import terminal_text

TOKEN_FILE_MODE = 0o600
"""Token files are their owner's alone: they hold bearer credentials."""
CALLBACK_PATH = "/callback"
CONNECTION_SECONDS = 10.0
"""How long one connection to the loopback listener has to send its request: a silent one is then
dropped. Connections are served side by side, so a silent one never delays the real redirect."""
MAX_REQUEST_HEAD = 16 * 1024
"""The most of a request's head the listener reads; a longer one is dropped unanswered."""


class AuthorizationRefused(RuntimeError):
    """The authorization server answered this client's own request (its `state`) with an error."""

    def __init__(self, error: str) -> None:
        super().__init__(f"authorization refused: {error}")
        self.error = error


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
        async with (
            httpx2.AsyncClient(follow_redirects=False, timeout=30) as http,
            http.stream("GET", authorization_url) as response,  # only its headers are read
        ):
            location = response.headers.get("location")
            status = response.status_code
        if status not in (301, 302, 303, 307, 308) or not location:
            raise RuntimeError(f"the authorization server did not redirect back (HTTP {status})")
        result = code_from_redirect(location, _query_value(authorization_url, "state"))
        if result is None:
            raise RuntimeError("the authorization server redirected back with another state")
        self._result = result

    async def callback(self) -> AuthorizationCodeResult:
        result, self._result = self._result, None
        if result is None:
            raise RuntimeError("no authorization code was received")
        return result


def _query_value(url: str, name: str) -> str | None:
    values = parse_qs(urlsplit(url).query).get(name)
    return values[0] if values else None


def code_from_redirect(location: str, expected_state: str | None) -> AuthorizationCodeResult | None:
    """The code, state and `iss` of the authorization response to the request sent with
    `expected_state`, or `None` for a response with any other state or none (anyone may send one;
    the SDK checks the state, and `iss`, again). That response with an `error` raises
    `AuthorizationRefused`."""
    query = parse_qs(urlsplit(location).query)
    state = query.get("state", [None])[0]
    if (
        expected_state is None
        or state is None
        or not secrets.compare_digest(state.encode(), expected_state.encode())
    ):
        return None
    if "error" in query:
        raise AuthorizationRefused(query["error"][0])
    if "code" not in query:
        raise RuntimeError("the authorization response carries no code")
    return AuthorizationCodeResult(code=query["code"][0], state=state, iss=query.get("iss", [None])[0])


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
    printed), and the redirect comes back to a listener on 127.0.0.1, bound before the URL is built
    so no other process can take the port (`port`: 0 lets the system choose one).

    Any local process can connect to that port, so the listener trusts no connection: one that says
    nothing is dropped after `CONNECTION_SECONDS` while others are served, a request that is not a
    callback gets a 404, and a callback that does not carry the pending `state` — a code or an
    `error` alike — gets a page saying it was ignored. The wait ends only with the response to this
    client's request, or after `timeout_seconds`.
    """

    def __init__(
        self,
        *,
        open_browser: Callable[[str], object] | None = None,
        show: Callable[[str], None] | None = None,
        timeout_seconds: float = 300.0,
        port: int = 0,
    ) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.bind(("127.0.0.1", port))
            self._socket.listen(16)
        except OSError as error:
            self._socket.close()
            raise OSError(
                error.errno, f"cannot listen for the sign-in on 127.0.0.1:{port}: {error.strerror}"
            ) from error
        self.redirect_uri = f"http://127.0.0.1:{self._socket.getsockname()[1]}{CALLBACK_PATH}"
        self._timeout_seconds = timeout_seconds
        self._pending_state: str | None = None
        self._open_browser = open_browser if open_browser is not None else webbrowser.open
        self._show = show if show is not None else _show_on_stderr
        weakref.finalize(self, self._socket.close)

    async def redirect(self, authorization_url: str) -> None:
        self._pending_state = _query_value(authorization_url, "state")
        self._show(f"Sign in to authorize this client:\n  {authorization_url}")
        # The browser opens on a thread of its own: `webbrowser` waits for a `$BROWSER` command to
        # exit, and one that stays until its page has loaded (a text browser, a script) would wait
        # for the redirect that `callback` can only answer once this returns: a deadlock.
        threading.Thread(
            target=_open_quietly, args=(self._open_browser, authorization_url), daemon=True
        ).start()

    async def callback(self) -> AuthorizationCodeResult:
        """The code of the response carrying the pending state; `TimeoutError` after the deadline."""
        # Wrapped for this event loop; not closed after, as the socket stays open: a step-up later
        # in the same run comes back to the same URI.
        listener = await anyio.abc.SocketListener.from_socket(self._socket)
        outcome: list[AuthorizationCodeResult | BaseException] = []
        with anyio.move_on_after(self._timeout_seconds):
            async with anyio.create_task_group() as group:

                async def serve(stream: anyio.abc.SocketStream) -> None:
                    async with stream:
                        with anyio.move_on_after(CONNECTION_SECONDS):
                            answer = await self._answer(stream)
                            if answer is not None:
                                outcome.append(answer)
                                group.cancel_scope.cancel()

                while True:
                    group.start_soon(serve, await listener.accept())
        if not outcome:
            raise TimeoutError(f"no sign-in came back within {self._timeout_seconds:g} s")
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        return outcome[0]

    def close(self) -> None:
        self._socket.close()

    async def _answer(self, stream: anyio.abc.SocketStream) -> AuthorizationCodeResult | BaseException | None:
        """Serve one connection: the response to this client's request (a code, or the refusal to
        raise), or `None` for anything else, which is answered and forgotten."""
        request_line = await _request_line(stream)
        if request_line is None:
            return None  # silent, closed early, or oversized: nothing to answer
        parts = request_line.split(" ")
        if len(parts) != 3 or parts[0] != "GET" or urlsplit(parts[1]).path != CALLBACK_PATH:
            await _respond(stream, 404, "Not found", "There is nothing here.")
            return None
        try:
            result = code_from_redirect(parts[1], self._pending_state)
        except RuntimeError as refused:
            await _respond(stream, 200, "Sign-in refused", "The sign-in was refused.")
            return refused
        if result is None:
            await _respond(
                stream,
                400,
                "Not this sign-in",
                "This response is not for the sign-in the command is waiting for, so it was ignored.",
            )
            return None
        await _respond(stream, 200, "Signed in", "You can close this window.")
        return result


def _open_quietly(open_browser: Callable[[str], object], url: str) -> None:
    """Open `url`; a browser that cannot start changes nothing, as the URL is printed to open by hand."""
    with contextlib.suppress(Exception):
        open_browser(url)


def _show_on_stderr(text: str) -> None:
    print(terminal_text(text, newlines=True), file=sys.stderr, flush=True)


async def _request_line(stream: anyio.abc.SocketStream) -> str | None:
    """The request line, once the whole head has arrived (answering before it has would reset the
    connection on the browser); `None` for a connection that ends or overflows first."""
    head = b""
    while b"\r\n\r\n" not in head:
        if len(head) > MAX_REQUEST_HEAD:
            return None
        try:
            head += await stream.receive(4096)
        except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return None
    return head.split(b"\r\n", 1)[0].decode("latin-1")


async def _respond(stream: anyio.abc.SocketStream, status: int, title: str, text: str) -> None:
    body = f"<!doctype html><title>{title}</title><p>{text}".encode()
    head = (
        f"HTTP/1.1 {status} {title}\r\nContent-Type: text/html; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nCache-Control: no-store\r\nReferrer-Policy: no-referrer\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(anyio.BrokenResourceError, OSError):  # gone: what it sent still counts
        await stream.send(head.encode() + body)
