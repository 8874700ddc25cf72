"""authlib's `AuthorizationServer`, adapted to Starlette and to what MCP needs from an authorization server.

- authorization code with PKCE, S256 only, required for every client (OAuth 2.1);
- client credentials, for the pre-registered service client (its tokens speak for a configured tenant);
- refresh tokens, rotated on every use (OAuth 2.1 §4.3.1 for public clients);
- dynamic client registration (RFC 7591) and Client ID Metadata Documents (https client ids);
- the RFC 8707 `resource` parameter becomes the token's `aud` — a token asked for another server is
  issued for that server, and this server's resource server refuses it;
- JWT access tokens (RFC 9068) signed with the data directory's keys.

authlib is synchronous; the routes run it on worker threads (`DevAuthorizationServer` never touches
the event loop). Requests reach it as `DevOAuth2Request`s built from already-read Starlette data.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from authlib.oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import (
    InvalidGrantError,
    InvalidRequestError,
    JsonPayload,
    JsonRequest,
    OAuth2Error,
    OAuth2Payload,
    OAuth2Request,
    UnauthorizedClientError,
    grants,
)
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint, InvalidClientMetadataError
from authlib.oauth2.rfc7636 import CodeChallenge

from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.devauth.client_metadata import ClientMetadataDocuments, is_document_url
from aml_mcp.devauth.minting import TokenMinter
from aml_mcp.devauth.redirects import acceptable_redirect_uri
from aml_mcp.devauth.storage import (
    DevAuthStore,
    DevClient,
    Grant,
    RegistrationRefused,
    StoredCode,
    StoredRefreshToken,
    digest,
    new_family,
)
from aml_mcp.devauth.users import DemoUser


class InvalidTargetError(OAuth2Error):  # type: ignore[misc]
    """RFC 8707 §2: the requested resource is invalid, unknown or malformed."""

    error = "invalid_target"


class RegistrationQuotaError(OAuth2Error):  # type: ignore[misc]
    """Dynamic registration refused for quota: 429 with `Retry-After` (rate) or 403 (total)."""

    def __init__(self, refused: RegistrationRefused) -> None:
        if refused.kind == "rate":
            super().__init__(
                f"at most {refused.limit} client registrations per minute: retry later",
                status_code=429,
                error="temporarily_unavailable",
            )
        else:
            super().__init__(
                f"this development server already holds its limit of {refused.limit} registered clients",
                status_code=403,
                error="access_denied",
            )
        self.retry_after = refused.retry_after

    def get_headers(self) -> list[tuple[str, str]]:
        headers: list[tuple[str, str]] = list(super().get_headers())
        if self.retry_after is not None:
            headers.append(("Retry-After", str(self.retry_after)))
        return headers


# --- request adaptation -------------------------------------------------------------------------


class _Payload(OAuth2Payload):  # type: ignore[misc]
    def __init__(self, values: Mapping[str, Sequence[str]]) -> None:
        self._lists = {key: list(items) for key, items in values.items()}
        self._data = {key: items[0] for key, items in self._lists.items() if items}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return defaultdict(list, self._lists)


class DevOAuth2Request(OAuth2Request):  # type: ignore[misc]
    """An authlib request over data the async route has already read (query and form, as lists)."""

    def __init__(
        self,
        method: str,
        uri: str,
        headers: Mapping[str, str],
        query: Mapping[str, Sequence[str]],
        form: Mapping[str, Sequence[str]],
    ) -> None:
        # authlib reads "Authorization" by its canonical name: keep the case-insensitive mapping as given.
        super().__init__(method, uri, headers=headers)
        merged: dict[str, list[str]] = {key: list(values) for key, values in query.items()}
        for key, values in form.items():
            merged.setdefault(key, []).extend(values)
        self.payload = _Payload(merged)
        self._args = {key: values[0] for key, values in query.items() if values}
        self._form_data = {key: values[0] for key, values in form.items() if values}

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form_data


class _JsonPayload(JsonPayload):  # type: ignore[misc]
    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = dict(data)

    @property
    def data(self) -> dict[str, Any]:
        return self._data


class DevJsonRequest(JsonRequest):  # type: ignore[misc]
    def __init__(self, method: str, uri: str, headers: Mapping[str, str], data: Mapping[str, Any]) -> None:
        super().__init__(method, uri, headers)
        self.payload = _JsonPayload(data)


@dataclass(slots=True)
class AuthlibResponse:
    """What authlib asks the framework to send: status, body (dict or str), headers."""

    status: int
    body: Any
    headers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def location(self) -> str | None:
        return next((value for name, value in self.headers if name.lower() == "location"), None)

    def json_body(self) -> bytes:
        return json.dumps(self.body).encode() if isinstance(self.body, dict) else str(self.body).encode()


@dataclass(frozen=True, slots=True)
class Consent:
    """The resource owner's decision, handed to authlib as the `grant_user`."""

    user: DemoUser
    scope: str
    resource: str


# --- grants -------------------------------------------------------------------------------------


class S256Only(CodeChallenge):  # type: ignore[misc]
    """PKCE is required of every client, with S256 only (OAuth 2.1 §4.1.1; `plain` is refused)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("PKCE is required: missing 'code_challenge'")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE code_challenge_method must be S256")
        super().validate_code_challenge(grant, redirect_uri)

    def validate_code_verifier(self, grant: Any, result: Any) -> None:
        if not grant.request.form.get("code_verifier"):
            raise InvalidRequestError("PKCE is required: missing 'code_verifier'")
        super().validate_code_verifier(grant, result)


def _single_resource(request: OAuth2Request) -> str | None:
    """The RFC 8707 `resource` of a request: one absolute URI without fragment, or absent."""
    values = request.payload.datalist.get("resource", [])
    if not values:
        return None
    if len(values) > 1:
        raise InvalidTargetError("only one 'resource' is supported per request")
    value = values[0]
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in value):
        # Never part of a URI (RFC 3986), and NUL cannot even be stored on PostgreSQL: refused
        # here, before the consent page shows it or a code remembers it.
        raise InvalidTargetError("'resource' must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
    except ValueError:
        raise InvalidTargetError("'resource' is not a valid URI") from None
    if not parts.scheme or not parts.netloc or parts.fragment:
        raise InvalidTargetError("'resource' must be an absolute URI without a fragment")
    return str(value)


def _checked_resource(request: OAuth2Request, granted: str) -> str:
    """At the token endpoint a `resource`, if sent, must be the one the grant was made for."""
    requested = _single_resource(request)
    if requested is not None and requested != granted:
        raise InvalidTargetError("'resource' differs from the one this grant was issued for")
    return granted


class DevAuthorizationCodeGrant(grants.AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]
    server: DevAuthorizationServer

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        consent: Consent = request.user
        data = request.payload.data
        self.server.store.put_code(
            code,
            StoredCode(
                client_id=request.client.get_client_id(),
                scope=consent.scope,
                subject=consent.user.username,
                tenant=consent.user.tenant,
                resource=consent.resource,
                redirect_uri=request.payload.redirect_uri or "",
                code_challenge=data["code_challenge"],
                code_challenge_method=data["code_challenge_method"],
                family=new_family(),
            ),
        )

    def query_authorization_code(self, code: str, client: DevClient) -> StoredCode | None:
        """Looks the code up without using it (a replayed code revokes its family here)."""
        return self.server.store.code(code, client.client_id)

    def delete_authorization_code(self, authorization_code: StoredCode) -> None:
        """Nothing left to do: `authenticate_user` redeemed the code before any token was made."""

    def authenticate_user(self, authorization_code: StoredCode) -> Grant:
        """After every check passed (client, redirect URI, PKCE, resource): redeem the code, which
        succeeds for one request only however many race, then speak for its grant."""
        resource = _checked_resource(self.request, authorization_code.resource)
        if not self.server.store.redeem_code(authorization_code.code_sha256):
            raise InvalidGrantError("Invalid 'code' in request.")
        return Grant(
            client_id=authorization_code.client_id,
            scope=authorization_code.scope,
            subject=authorization_code.subject,
            tenant=authorization_code.tenant,
            resource=resource,
            family=authorization_code.family,
        )


class DevRefreshTokenGrant(grants.RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]
    INCLUDE_NEW_REFRESH_TOKEN = True
    server: DevAuthorizationServer

    def authenticate_refresh_token(self, refresh_token: str) -> StoredRefreshToken | None:
        """Looks the token up without using it (a rotated-out token revokes its family here)."""
        return self.server.store.refresh_token(refresh_token)

    def authenticate_user(self, refresh_token: StoredRefreshToken) -> Grant:
        """After every check passed (client, scope, resource): rotate the token out, which succeeds
        for one request only however many race (the others revoke the family), then speak for it."""
        resource = _checked_resource(self.request, refresh_token.resource)
        if not self.server.store.redeem_refresh_token(refresh_token.token_sha256):
            raise InvalidGrantError()
        return Grant(
            client_id=refresh_token.client_id,
            scope=refresh_token.scope,
            subject=refresh_token.subject,
            tenant=refresh_token.tenant,
            resource=resource,
            family=refresh_token.family,
        )

    def revoke_old_credential(self, refresh_token: StoredRefreshToken) -> None:
        """Nothing left to do: `authenticate_user` rotated the token out before the new one was made."""


class DevClientCredentialsGrant(grants.ClientCredentialsGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]
    server: DevAuthorizationServer

    def generate_token(self, user: Any = None, scope: str | None = None, **kwargs: Any) -> dict[str, Any]:
        client: DevClient = self.request.client
        if client.tenant is None:
            raise UnauthorizedClientError("this client has no tenant to act for")
        resource = _single_resource(self.request) or self.server.default_resource
        grant = Grant(
            client_id=client.client_id,
            scope=scope or "",
            subject=client.client_id,
            tenant=client.tenant,
            resource=resource,
        )
        result: dict[str, Any] = super().generate_token(user=grant, scope=scope, **kwargs)
        return result


# --- registration -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RegistrationLimits:
    """What one dynamic registration may contain, and how many the server accepts (see the settings)."""

    max_client_name_chars: int = 200
    max_redirect_uris: int = 10
    max_redirect_uri_chars: int = 2_000
    max_registered_clients: int = 1_000
    max_registrations_per_minute: int = 30


class DevRegistrationEndpoint(ClientRegistrationEndpoint):  # type: ignore[misc]
    """Open dynamic client registration (RFC 7591) — acceptable for a development server only."""

    server: DevAuthorizationServer

    def authenticate_token(self, request: Any) -> bool:
        return True

    def get_server_metadata(self) -> dict[str, Any]:
        return self.server.metadata()

    def generate_client_secret(self, request: Any) -> str | None:
        method = request.payload.data.get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else secrets.token_urlsafe(32)

    def save_client(
        self, client_info: dict[str, Any], client_metadata: dict[str, Any], request: Any
    ) -> DevClient:
        limits = self.server.registration_limits
        redirect_uris = client_metadata.get("redirect_uris") or []
        if not isinstance(redirect_uris, list) or not 0 < len(redirect_uris) <= limits.max_redirect_uris:
            raise InvalidClientMetadataError(f"redirect_uris must list 1 to {limits.max_redirect_uris} URIs")
        if not all(
            acceptable_redirect_uri(uri, max_chars=limits.max_redirect_uri_chars) for uri in redirect_uris
        ):
            raise InvalidClientMetadataError(
                "redirect_uris must be https or loopback http URIs (numeric port, no userinfo or fragment)"
            )
        client_name = client_metadata.get("client_name")
        if client_name is not None and (
            not isinstance(client_name, str) or len(client_name) > limits.max_client_name_chars
        ):
            raise InvalidClientMetadataError(
                f"client_name must be a string of at most {limits.max_client_name_chars} characters"
            )
        grant_types = client_metadata.get("grant_types") or ["authorization_code"]
        if not set(grant_types) <= {"authorization_code", "refresh_token"}:
            raise InvalidClientMetadataError(
                "registered clients may use authorization_code and refresh_token"
            )
        method = client_metadata.get("token_endpoint_auth_method", "client_secret_basic")
        secret = client_info.get("client_secret")
        client = DevClient(
            client_id=client_info["client_id"],
            redirect_uris=tuple(redirect_uris),
            grant_types=tuple(grant_types),
            token_endpoint_auth_method=method,
            client_name=client_name,
            secret_sha256=digest(secret) if secret else None,
        )
        try:
            self.server.store.register_client(
                client,
                max_total=limits.max_registered_clients,
                max_per_minute=limits.max_registrations_per_minute,
            )
        except RegistrationRefused as refused:
            raise RegistrationQuotaError(refused) from None
        return client

    def generate_client_registration_info(self, client: DevClient, request: Any) -> dict[str, Any]:
        return {"token_endpoint_auth_method": client.token_endpoint_auth_method}

    def create_registration_response(self, request: Any) -> tuple[int, dict[str, Any], Any]:
        status, body, headers = super().create_registration_response(request)
        return status, registration_document(body), headers


def registration_document(body: Mapping[str, Any]) -> dict[str, Any]:
    """The RFC 7591 §3.2.1 answer: only what was issued or registered, never a `null` member.

    The library fills `client_secret` (None for a public client) and `client_secret_expires_at`
    whatever was issued; strict clients (the TypeScript SDK's schema, the Inspector) reject a
    `null` where a string is expected, and `client_secret_expires_at` is REQUIRED only when a
    secret was issued, so both go when there is no secret.
    """
    document = {name: value for name, value in body.items() if value is not None}
    if "client_secret" not in document:
        document.pop("client_secret_expires_at", None)
    return document


# --- the server ---------------------------------------------------------------------------------


class DevAuthorizationServer(AuthorizationServer):  # type: ignore[misc]
    def __init__(
        self,
        *,
        issuer: str,
        default_resource: str,
        store: DevAuthStore,
        minter: TokenMinter,
        hierarchy: ScopeHierarchy,
        scopes_supported: Sequence[str],
        access_token_ttl: int,
        refresh_token_ttl: int,
        documents: ClientMetadataDocuments | None = None,
        registration_limits: RegistrationLimits | None = None,
        revocation_margin_seconds: int = 90,
    ) -> None:
        super().__init__(scopes_supported=list(scopes_supported))
        self.issuer = issuer
        self.default_resource = default_resource
        self.store = store
        self.minter = minter
        self.hierarchy = hierarchy
        self.access_token_ttl = access_token_ttl
        self.refresh_token_ttl = refresh_token_ttl
        self.documents = documents
        self.registration_limits = registration_limits or RegistrationLimits()
        self.revocation_margin_seconds = revocation_margin_seconds
        """How long after its expiry an access token may still be accepted (the verifier's leeway,
        plus clock slack): a revocation of it must last that long."""
        self.register_grant(DevAuthorizationCodeGrant, [S256Only(required=True)])
        self.register_grant(DevRefreshTokenGrant)
        self.register_grant(DevClientCredentialsGrant)
        self.register_endpoint(DevRegistrationEndpoint)
        self.register_token_generator("default", self._generate_token)

    # endpoints, relative to the issuer
    @property
    def endpoints(self) -> dict[str, str]:
        return {
            "authorization_endpoint": f"{self.issuer}/authorize",
            "token_endpoint": f"{self.issuer}/token",
            "registration_endpoint": f"{self.issuer}/register",
            "jwks_uri": f"{self.issuer}/jwks.json",
        }

    def metadata(self) -> dict[str, Any]:
        """RFC 8414 authorization server metadata (with RFC 9207 and CIMD advertisements)."""
        return {
            "issuer": self.issuer,
            **self.endpoints,
            "scopes_supported": list(self.scopes_supported),
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "token_endpoint_auth_methods_supported": ["none", "client_secret_basic", "client_secret_post"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": self.documents is not None,
            "resource_indicators_supported": True,
        }

    # --- authlib hooks ---
    def query_client(self, client_id: str) -> DevClient | None:
        if self.documents is not None and is_document_url(client_id):
            return self.documents.client(client_id)
        return self.store.client(client_id)

    def pinned_documents(
        self, resolved: Mapping[str, DevClient | None]
    ) -> contextlib.AbstractContextManager[None]:
        """While handling one request on a worker thread: the documents resolved for it, and no fetch."""
        return self.documents.pinned(resolved) if self.documents is not None else contextlib.nullcontext()

    def save_token(self, token: dict[str, Any], request: OAuth2Request) -> None:
        """Keeps the new refresh token. If a replay revoked its family meanwhile, the token is stored
        already revoked: the request that won the race still gets its answer, but nothing descended
        from the replayed credential keeps working."""
        refresh_token = token.get("refresh_token")
        if refresh_token:
            grant: Grant = request.user
            self.store.put_refresh_token(refresh_token, grant, self.refresh_token_ttl)

    def create_oauth2_request(self, request: Any) -> OAuth2Request:
        if isinstance(request, OAuth2Request):
            return request
        raise TypeError("the development server is driven with DevOAuth2Request objects")

    def create_json_request(self, request: Any) -> JsonRequest:
        if isinstance(request, JsonRequest):
            return request
        raise TypeError("the development server is driven with DevJsonRequest objects")

    def handle_response(self, status: int, body: Any, headers: Any) -> AuthlibResponse:
        return AuthlibResponse(status, body, [(str(k), str(v)) for k, v in headers])

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        return None

    def _generate_token(
        self,
        grant_type: str,
        client: DevClient,
        user: Grant | None = None,
        scope: str | None = None,
        expires_in: int | None = None,
        include_refresh_token: bool = True,
    ) -> dict[str, Any]:
        if user is None:
            raise InvalidRequestError("no grant to issue a token for")
        ttl = expires_in or self.access_token_ttl
        granted = scope or ""
        minted = self.minter.mint(
            subject=user.subject,
            tenant=user.tenant,
            client_id=client.client_id,
            scopes=granted.split(),
            audience=user.resource,
            ttl_seconds=ttl,
        )
        if user.family:
            # Remembered with its family, so a replay that revokes the family revokes this token
            # too; if a replay revoked it meanwhile, the token is born revoked (and published
            # before this answer is sent).
            keep_until = float(minted.claims["exp"]) + self.revocation_margin_seconds
            self.store.remember_access_token(minted.jti, user.family, keep_until)
        token: dict[str, Any] = {
            "token_type": "Bearer",
            "access_token": minted.token,
            "expires_in": ttl,
            "scope": minted.claims["scope"],
        }
        if include_refresh_token and client.check_grant_type("refresh_token"):
            token["refresh_token"] = secrets.token_urlsafe(32)
        return token

    # --- consent helpers for the login page ---
    def resource_of(self, request: OAuth2Request) -> str:
        return _single_resource(request) or self.default_resource

    def granted_scope(self, user: DemoUser, requested: str | None) -> str:
        """What the user can grant of what was asked: requested scopes they hold (hierarchy applied).

        Asking for nothing gets the user's own scopes. Scopes the user lacks are left out rather
        than failing the request (RFC 6749 §3.3); the token response's `scope` says what was granted.
        """
        if not requested:
            return " ".join(sorted(user.scopes))
        effective = self.hierarchy.effective(user.scopes)
        return " ".join(sorted(scope for scope in set(requested.split()) if scope in effective))
