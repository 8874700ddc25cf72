"""HTTP face of the development authorization server: login/consent, token, registration, JWKS, metadata.

Each route reads the request on the event loop (a body of at most `max_body_bytes`, else 413), fetches
any Client ID Metadata Document it names (on the documents' own limiter, never on a worker thread),
then runs authlib on a worker thread. A store that cannot be reached (the shared database down) is
a 503 with `Retry-After`, never a 500 nor a client error. Every redirect back to a client carries
`iss` (RFC 9207),
errors included. Before the user has acted, errors are sent back automatically only to loopback
redirect URIs; anyone can register an https one, so there the user sees the error and a link instead
of being forwarded (no open redirector, RFC 9700 §4.11.2).

Every answer carries the pages' security headers (`pages.page_headers`: not framable, no script,
no `Referer` to another site). Password attempts on the sign-in page are counted per user and per
client address in the store (`login_limits`); one made during a backoff is answered 429 with
`Retry-After` before the password is compared. After each token request, the access tokens of any
grant family a replay revoked are handed to the resource server's revocation list before the
answer goes out (`revocations.FamilyRevocations`).
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import anyio.to_thread
from authlib.common.urls import add_params_to_uri
from authlib.oauth2.rfc6749 import OAuth2Error
from starlette.datastructures import ImmutableMultiDict
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import Message, Receive

from aml_mcp.devauth.authorization_server import (
    AuthlibResponse,
    Consent,
    DevAuthorizationServer,
    DevJsonRequest,
    DevOAuth2Request,
)
from aml_mcp.devauth.client_metadata import is_document_url
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.login_limits import LoginLimits, address_key, retry_after, user_key
from aml_mcp.devauth.pages import (
    consent_page,
    error_page,
    form_signature,
    page_headers,
    redirect_offer_page,
    request_fields,
)
from aml_mcp.devauth.redirects import redirects_without_asking
from aml_mcp.devauth.revocations import FamilyRevocations
from aml_mcp.devauth.storage import DevClient
from aml_mcp.devauth.users import UserDirectory
from aml_mcp.store.faults import storage_fault

logger = logging.getLogger(__name__)

AUTHORIZE_PARAMS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
    "resource",
    "prompt",
)
_NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
_PAGE_HEADERS = page_headers()

Endpoint = Callable[[Request], Awaitable[Response]]


def _hardened(endpoint: Endpoint) -> Endpoint:
    """`endpoint` with the pages' security headers on every answer (headers it set itself win: the
    consent page's `form-action` names its client's redirect origin)."""

    async def hardened(request: Request) -> Response:
        response = await endpoint(request)
        for name, value in _PAGE_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    return hardened


def _lists(values: ImmutableMultiDict[str, Any]) -> dict[str, list[str]]:
    result: dict[str, list[str]] = {}
    for key, value in values.multi_items():
        if isinstance(value, str):
            result.setdefault(key, []).append(value)
    return result


class UnreadBody(Exception):
    """A request body this server will not (or could not) read, and the answer to send instead."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status_code)
        self.response = response


def _replay(body: bytes) -> Receive:
    """An ASGI `receive` that hands over an already-read body once, then reports a disconnect."""
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


RETRY_AFTER = "5"


def _unavailable_page(exc: Exception) -> Response | None:
    """The page for a store that cannot be reached (503, try again), or None for any other failure."""
    fault = storage_fault(exc)
    if fault is None:
        return None
    logger.warning("development authorization server: %s", fault)
    return HTMLResponse(
        error_page("The authorization server cannot reach its store right now: try again shortly."),
        status_code=503,
        headers={**_NO_STORE, "Retry-After": RETRY_AFTER},
    )


def _to_starlette(response: AuthlibResponse) -> Response:
    headers = {name: value for name, value in response.headers if name.lower() != "content-type"}
    if response.location is not None:
        return RedirectResponse(response.location, status_code=response.status, headers=headers)
    return Response(
        response.json_body(), status_code=response.status, headers=headers, media_type="application/json"
    )


class DevAuthRoutes:
    def __init__(
        self,
        *,
        server: DevAuthorizationServer,
        users: UserDirectory,
        keys: DevSigningKeys,
        form_secret: bytes,
        mount_path: str,
        max_body_bytes: int = 65_536,
        login_limits: LoginLimits | None = None,
        revocations: FamilyRevocations | None = None,
    ) -> None:
        self.server = server
        self.users = users
        self.keys = keys
        self.form_secret = form_secret
        self.mount_path = mount_path
        self.max_body_bytes = max_body_bytes
        self.login_limits = login_limits or LoginLimits()
        self.revocations = revocations
        issuer = urlsplit(server.issuer)
        self._origin = (issuer.scheme, issuer.netloc)

    def routes(self) -> list[Route]:
        path = self.mount_path
        metadata = _hardened(self.metadata)
        return [
            Route(f"/.well-known/oauth-authorization-server{path}", metadata, methods=["GET"]),
            Route(f"{path}/.well-known/oauth-authorization-server", metadata, methods=["GET"]),
            Route(f"{path}/authorize", _hardened(self.authorize), methods=["GET", "POST"]),
            Route(f"{path}/token", _hardened(self.token), methods=["POST"]),
            Route(f"{path}/register", _hardened(self.register), methods=["POST"]),
            Route(f"{path}/jwks.json", _hardened(self.jwks), methods=["GET"]),
        ]

    def _uri(self, request: Request) -> str:
        """The request URI as the issuer names it (never from the Host header)."""
        return urlunsplit((*self._origin, request.url.path, request.url.query, ""))

    def _with_issuer(self, response: AuthlibResponse) -> Response:
        location = response.location
        if location is not None:
            response.headers = [(k, v) for k, v in response.headers if k.lower() != "location"]
            response.headers.append(("Location", add_params_to_uri(location, [("iss", self.server.issuer)])))
        return _to_starlette(response)

    # --- reading requests ---
    def _too_large(self) -> UnreadBody:
        return UnreadBody(
            JSONResponse(
                {
                    "error": "invalid_request",
                    "error_description": f"request body exceeds {self.max_body_bytes} bytes",
                },
                status_code=413,
                headers={**_NO_STORE, "Connection": "close"},
            )
        )

    async def _body(self, request: Request) -> bytes:
        """The request body, at most `max_body_bytes` (declared or read), else `UnreadBody` with a 413:
        anonymous callers cannot make the issuer buffer, parse or store more."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            raise self._too_large()
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > self.max_body_bytes:
                    raise self._too_large()
        except ClientDisconnect:
            raise UnreadBody(Response(status_code=400)) from None
        return bytes(body)

    async def _form(self, request: Request) -> dict[str, list[str]]:
        """The form fields of a bounded body (Starlette parses it, from the bytes already read)."""
        body = await self._body(request)
        return _lists(await Request(request.scope, _replay(body)).form())

    async def _documents(self, values: Mapping[str, Sequence[str]]) -> dict[str, DevClient | None]:
        """The Client ID Metadata Document a request names (its first `client_id`), fetched here on
        the event loop, within the documents' own limiter and deadline, before authlib runs."""
        documents = self.server.documents
        client_ids = values.get("client_id") or ()
        if documents is None or not client_ids or not is_document_url(client_ids[0]):
            return {}
        return {client_ids[0]: await documents.resolve(client_ids[0])}

    async def _run(
        self, call: Callable[[], AuthlibResponse], documents: Mapping[str, DevClient | None]
    ) -> AuthlibResponse:
        """Run authlib off the event loop. Anything it did not turn into an OAuth error is a request it
        could not handle: logged for us, a plain `invalid_request` for the client (never a 500 page)."""

        def guarded() -> AuthlibResponse:
            try:
                with self.server.pinned_documents(documents):
                    return call()
            except OAuth2Error:
                raise
            except Exception as exc:
                fault = storage_fault(exc)
                if fault is not None:
                    logger.warning("development authorization server: %s", fault)
                    return AuthlibResponse(
                        503,
                        {"error": "temporarily_unavailable", "error_description": "try again shortly"},
                        [*_NO_STORE.items(), ("Retry-After", RETRY_AFTER)],
                    )
                logger.exception("development authorization server failed on a request")
                return AuthlibResponse(400, {"error": "invalid_request"}, list(_NO_STORE.items()))

        return await anyio.to_thread.run_sync(guarded)

    # --- metadata & keys ---
    async def metadata(self, request: Request) -> Response:
        return JSONResponse(self.server.metadata(), headers={"Cache-Control": "max-age=300"})

    async def jwks(self, request: Request) -> Response:
        try:
            keys = await anyio.to_thread.run_sync(self.keys.jwks)
        except Exception as exc:
            fault = storage_fault(exc)
            if fault is None:
                raise
            logger.warning("development authorization server: keys unavailable: %s", fault)
            return JSONResponse(
                {"error": "temporarily_unavailable"},
                status_code=503,
                headers={**_NO_STORE, "Retry-After": RETRY_AFTER},
            )
        return JSONResponse(keys, headers={"Cache-Control": "max-age=60"})

    # --- authorization endpoint ---
    def _refusal(self, error: OAuth2Error, oauth_request: DevOAuth2Request, *, user_acted: bool) -> Response:
        """An authorization error. authlib names a redirect URI only once it has validated it against
        the client. It is followed automatically after the user acted, or when it is loopback;
        otherwise the user sees the error and decides whether to follow the link back."""
        if not error.redirect_uri:
            return HTMLResponse(
                error_page(error.description or error.error or "invalid request"), status_code=400
            )
        response = self._with_issuer(self.server.handle_error_response(oauth_request, error))
        if user_acted or redirects_without_asking(error.redirect_uri):
            return response
        return HTMLResponse(
            redirect_offer_page(
                error.description or error.error or "invalid request", response.headers["location"]
            ),
            status_code=400,
            headers=_NO_STORE,
        )

    def _consent(
        self,
        oauth_request: DevOAuth2Request,
        values: Mapping[str, Sequence[str]],
        *,
        failed: bool = False,
        backed_off: int | None = None,
    ) -> Response:
        grant = self.server.get_consent_grant(oauth_request)
        try:
            resource = self.server.resource_of(oauth_request)
        except OAuth2Error as error:
            error.redirect_uri, error.state = grant.redirect_uri, oauth_request.payload.state
            raise
        fields = request_fields(values, AUTHORIZE_PARAMS)
        client = oauth_request.client
        html = consent_page(
            client_name=client.client_name or client.client_id,
            client_id=client.client_id,
            redirect_uri=grant.redirect_uri,
            resource=resource,
            scope=oauth_request.payload.scope or "",
            fields=fields,
            signature=form_signature(self.form_secret, fields),
            users=self.users,
            failed_login=failed,
            retry_after=backed_off,
        )
        headers = {**_NO_STORE, **page_headers(grant.redirect_uri)}
        if backed_off is not None:
            return HTMLResponse(html, status_code=429, headers={**headers, "Retry-After": str(backed_off)})
        return HTMLResponse(html, status_code=401 if failed else 200, headers=headers)

    async def authorize(self, request: Request) -> Response:
        if request.method == "GET":
            values = _lists(request.query_params)
            oauth_request = DevOAuth2Request("GET", self._uri(request), request.headers, values, {})
            documents = await self._documents(values)

            def show() -> Response:
                try:
                    with self.server.pinned_documents(documents):
                        return self._consent(oauth_request, values)
                except OAuth2Error as error:
                    return self._refusal(error, oauth_request, user_acted=False)
                except Exception as exc:
                    if (unavailable := _unavailable_page(exc)) is not None:
                        return unavailable
                    logger.exception("development authorization server failed on an authorization request")
                    return HTMLResponse(error_page("This authorization request could not be handled."), 400)

            response: Response = await anyio.to_thread.run_sync(show)
            return response
        try:
            return await self._decide(request)
        except UnreadBody as unread:
            return unread.response

    async def _decide(self, request: Request) -> Response:
        address = request.client.host if request.client is not None else "unknown"
        form = await self._form(request)
        fields = request_fields(form, AUTHORIZE_PARAMS)
        presented = (form.get("consent_mac") or [""])[0]
        if not hmac.compare_digest(presented, form_signature(self.form_secret, fields)):
            return HTMLResponse(
                error_page("This consent form was not issued by this server."), status_code=400
            )
        values: dict[str, list[str]] = {}
        for name, value in fields:
            values.setdefault(name, []).append(value)
        oauth_request = DevOAuth2Request("POST", self._uri(request), request.headers, {}, values)
        decision = (form.get("decision") or [""])[0]
        username = (form.get("username") or [""])[0]
        password = (form.get("password") or [""])[0]
        documents = await self._documents(values)

        def decide() -> Response:
            try:
                with self.server.pinned_documents(documents):
                    return decide_pinned()
            except Exception as exc:
                if (unavailable := _unavailable_page(exc)) is not None:
                    return unavailable
                logger.exception("development authorization server failed on a consent")
                return HTMLResponse(error_page("This consent could not be handled."), 400)

        def decide_pinned() -> Response:
            try:
                grant = self.server.get_consent_grant(oauth_request)
            except OAuth2Error as error:
                return self._refusal(error, oauth_request, user_acted=True)
            try:
                if decision != "approve":
                    result = self.server.create_authorization_response(
                        oauth_request, grant_user=None, grant=grant
                    )
                    return self._with_issuer(result)
                keys = [address_key(address)]
                if self.users.get(username) is not None:  # only users that exist: few keys
                    keys.append(user_key(username))
                wait = self.server.store.admit_login(keys, self.login_limits)
                if wait > 0:  # backed off: refused before the password is compared
                    return self._consent(oauth_request, values, backed_off=retry_after(wait))
                user = self.users.authenticate(username, password)
                if user is None:
                    return self._consent(oauth_request, values, failed=True)
                self.server.store.login_succeeded(reset=[user_key(username)], uncount=[address_key(address)])
                consent = Consent(
                    user=user,
                    scope=self.server.granted_scope(user, oauth_request.payload.scope),
                    resource=self.server.resource_of(oauth_request),
                )
                result = self.server.create_authorization_response(
                    oauth_request, grant_user=consent, grant=grant
                )
                return self._with_issuer(result)
            except OAuth2Error as error:
                # Only ever the redirect URI authlib validated for this grant, never the raw parameter.
                if not error.redirect_uri:
                    error.redirect_uri = grant.redirect_uri
                    error.state = oauth_request.payload.state
                return self._refusal(error, oauth_request, user_acted=True)

        response: Response = await anyio.to_thread.run_sync(decide)
        return response

    # --- token endpoint ---
    async def token(self, request: Request) -> Response:
        try:
            form = await self._form(request)
        except UnreadBody as unread:
            return unread.response
        oauth_request = DevOAuth2Request("POST", self._uri(request), request.headers, {}, form)
        documents = await self._documents(form)
        result = await self._run(lambda: self.server.create_token_response(oauth_request), documents)
        if self.revocations is not None:
            try:
                await self.revocations.publish()
            except Exception as exc:
                # Fail closed: a token whose family was revoked is not handed out while its
                # revocation cannot be recorded (the background publisher retries).
                logger.warning("development authorization server: publishing revocations: %s", exc)
                return JSONResponse(
                    {"error": "temporarily_unavailable", "error_description": "try again shortly"},
                    status_code=503,
                    headers={**_NO_STORE, "Retry-After": RETRY_AFTER},
                )
        return _to_starlette(result)

    # --- dynamic client registration ---
    async def register(self, request: Request) -> Response:
        try:
            body = await self._body(request)
        except UnreadBody as unread:
            return unread.response
        try:
            data = json.loads(body)
        except (ValueError, RecursionError):
            data = None
        if not isinstance(data, dict):
            return JSONResponse(
                {"error": "invalid_client_metadata", "error_description": "body must be a JSON object"},
                status_code=400,
                headers=_NO_STORE,
            )
        json_request = DevJsonRequest("POST", self._uri(request), request.headers, data)
        result = await self._run(
            lambda: self.server.create_endpoint_response("client_registration", json_request), {}
        )
        return _to_starlette(result)
