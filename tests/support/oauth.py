"""Servers with authentication on and real token issuers, for tests that need tokens (reusable everywhere).

Three pieces, no network beyond loopback:

- `TestIssuer` — an OAuth issuer over real HTTP on 127.0.0.1 (a random port): RFC 8414 metadata at
  `/.well-known/oauth-authorization-server` and a JWKS at `/jwks.json`. It mints RFC 9068 access
  tokens with keys it holds (`mint(...)`), can add and rotate keys, and counts JWKS fetches. Use it
  to test what the resource server accepts: any claim can be overridden or removed. It needs a real
  socket because the server under test fetches its metadata, keys and introspection answers with
  its own HTTP client.
- `secured_server(...)` — `build_app` with authentication on, trusting a `TestIssuer` (and/or the
  embedded development authorization server), served in-process (`InProcessServer`), or by
  `LiveServer` on a real socket with `real_socket=True` (SSE streams, real MCP clients). The
  server's resource URL (the audience tokens must carry) is known before the app is built. Yields a
  `SecuredServer` with helpers to post MCP requests and read the audit trail.
- `audit_events(...)` / `wait_for_audit(...)` — read the audit rows the server wrote (they join the
  store's next group commit, so wait for them rather than reading once).

Typical use::

    with TestIssuer() as issuer, secured_server(tmp_path, catalog, issuer=issuer) as server:
        token = issuer.mint(audience=server.resource, subject="alice", tenant="bank-a", scope="aml:read")
        response = server.post("tools/call", {"name": "search", "arguments": {}}, token=token)
        assert response.status_code == 200

For the interactive step of the authorization code flow against the development authorization
server, `approve(...)` / `approve_async(...)` play the browser: they load the login/consent page,
sign in as a demo user, approve (or deny) and return the redirect the browser would have followed
(pass `browser=server.client()` when the server is in-process).
"""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any, LiteralString

import httpx
import jwt
import psycopg
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import get_default_algorithms
from psycopg.rows import dict_row
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from aml_mcp.app import build_app
from aml_mcp.audit import AuditLog
from aml_mcp.audit.sinks import AUDIT_FILE_NAME
from aml_mcp.auth.settings import IntrospectionSettings, IssuerSettings
from aml_mcp.catalog import Catalog
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.devauth.minting import MintedToken
from aml_mcp.devauth.settings import DevAuthSettings
from aml_mcp.devauth.wiring import token_minter
from aml_mcp.persistence import open_persistence
from tests.support.asgi import DEFAULT_PORT, InProcessServer
from tests.support.live_server import LiveServer
from tests.support.mcp_http import message, post
from tests.support.waiting import eventually

_KEY_FACTORIES: dict[str, Callable[[], Any]] = {
    "RS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "PS256": lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    "ES256": lambda: ec.generate_private_key(ec.SECP256R1()),
    "EdDSA": lambda: ed25519.Ed25519PrivateKey.generate(),
}


@dataclass
class IssuerKey:
    kid: str
    alg: str
    private: Any

    def public_jwk(self) -> dict[str, Any]:
        jwk: dict[str, Any] = get_default_algorithms()[self.alg].to_jwk(
            self.private.public_key(), as_dict=True
        )
        jwk.update({"kid": self.kid, "alg": self.alg, "use": "sig"})
        return jwk


class TestIssuer:
    """An authorization server's token side, served over real HTTP on 127.0.0.1.

    `issuer` is its base URL (no path). Keys listed in `published` are in the JWKS; `mint` signs with
    `signing_kid` unless told otherwise, so a token with an unpublished key is one `mint(kid=...)` away.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, alg: str = "RS256") -> None:
        self.keys: dict[str, IssuerKey] = {}
        self.published: list[str] = []
        self.jwks_requests = 0
        self.metadata_requests = 0
        self.introspection_requests = 0
        self.opaque_tokens: dict[str, dict[str, Any]] = {}
        self.introspection_client = ("resource-server", secrets.token_urlsafe(16))
        self.signing_kid = self.add_key(alg)
        app = Starlette(
            routes=[
                Route("/.well-known/oauth-authorization-server", self._metadata),
                Route("/jwks.json", self._jwks),
                Route("/introspect", self._introspect, methods=["POST"]),
            ]
        )
        self._live = LiveServer(app)
        self.issuer = self._live.url

    def __enter__(self) -> TestIssuer:
        self._live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._live.__exit__(exc_type, exc, tb)

    @property
    def settings(self) -> IssuerSettings:
        """How a server is told to trust this issuer (keys found through its metadata)."""
        return IssuerSettings(issuer=self.issuer)

    def add_key(self, alg: str = "RS256", *, publish: bool = True) -> str:
        kid = secrets.token_hex(6)
        self.keys[kid] = IssuerKey(kid, alg, _KEY_FACTORIES[alg]())
        if publish:
            self.published.append(kid)
        return kid

    def rotate(self, alg: str = "RS256") -> str:
        """A new signing key, published next to the old ones (which stay valid)."""
        self.signing_kid = self.add_key(alg)
        return self.signing_kid

    async def _metadata(self, request: Request) -> JSONResponse:
        self.metadata_requests += 1
        return JSONResponse(
            {
                "issuer": self.issuer,
                "jwks_uri": f"{self.issuer}/jwks.json",
                "token_endpoint": f"{self.issuer}/token",
                "response_types_supported": ["code"],
            }
        )

    async def _jwks(self, request: Request) -> JSONResponse:
        self.jwks_requests += 1
        return JSONResponse({"keys": [self.keys[kid].public_jwk() for kid in self.published]})

    @property
    def introspection_settings(self) -> IntrospectionSettings:
        """How a server is told to introspect opaque tokens here (RFC 7662)."""
        client_id, secret = self.introspection_client
        return IntrospectionSettings(
            endpoint=f"{self.issuer}/introspect",
            issuer=self.issuer,
            client_id=client_id,
            client_secret=secret,
        )

    def opaque(self, *, audience: str | list[str], active: bool = True, **claims_args: Any) -> str:
        """An opaque (non-JWT) token whose claims only the introspection endpoint reveals."""
        token = secrets.token_urlsafe(24)
        shape = {k: claims_args.pop(k) for k in list(claims_args) if k in _CLAIM_ARGS}
        self.opaque_tokens[token] = {
            **self.claims(audience=audience, **shape),
            **claims_args,
            "active": active,
        }
        return token

    async def _introspect(self, request: Request) -> JSONResponse:
        self.introspection_requests += 1
        expected = "Basic " + base64.b64encode(":".join(self.introspection_client).encode()).decode()
        if request.headers.get("authorization") != expected:
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        form = await request.form()
        answer = self.opaque_tokens.get(str(form.get("token")), {"active": False})
        return JSONResponse(answer if answer.get("active") else {"active": False})

    def claims(
        self,
        *,
        audience: str | list[str],
        subject: str = "alice",
        tenant: str = "bank-a",
        client_id: str = "test-client",
        scope: str = "aml:read",
        ttl: int = 300,
        tenant_claim: str = "tenant",
    ) -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.issuer,
            "sub": subject,
            "aud": audience,
            "client_id": client_id,
            tenant_claim: tenant,
            "scope": scope,
            "iat": now,
            "nbf": now,
            "exp": now + ttl,
            "jti": secrets.token_urlsafe(12),
        }

    def sign(
        self, claims: Mapping[str, Any], *, kid: str | None = None, headers: Mapping[str, Any] | None = None
    ) -> str:
        key = self.keys[kid or self.signing_kid]
        header = {"kid": key.kid, "typ": "at+jwt", **(headers or {})}
        return jwt.encode(dict(claims), key.private, algorithm=key.alg, headers=header)

    def mint(
        self,
        *,
        audience: str | list[str],
        kid: str | None = None,
        headers: Mapping[str, Any] | None = None,
        remove: Sequence[str] = (),
        **overrides: Any,
    ) -> str:
        """A signed access token. Named `claims()` arguments shape it; other keywords override claims."""
        shape = {k: overrides.pop(k) for k in list(overrides) if k in _CLAIM_ARGS}
        claims = self.claims(audience=audience, **shape)
        claims.update(overrides)
        for name in remove:
            claims.pop(name, None)
        return self.sign(claims, kid=kid, headers=headers)


_CLAIM_ARGS = {"subject", "tenant", "client_id", "scope", "ttl", "tenant_claim"}


class _Deferred:
    """An ASGI app whose target is set after the port is known (the resource URL needs the port)."""

    def __init__(self) -> None:
        self.target: Starlette | None = None

    @property
    def state(self) -> Any:
        return self.target.state if self.target is not None else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.target is not None
        await self.target(scope, receive, send)


@dataclass
class SecuredServer:
    """A running server with authentication on."""

    served: InProcessServer | LiveServer
    settings: Settings
    issuer: TestIssuer | None
    http: httpx.Client = field(repr=False)
    audit_log: AuditLog | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return self.served.url

    @property
    def port(self) -> int:
        return self.served.port

    @property
    def metrics_url(self) -> str:
        """The metrics listener's base URL; only a `real_socket` server has one, on the app's own loop."""
        assert isinstance(self.served, LiveServer) and self.served.beside_url is not None
        return self.served.beside_url

    def client(self) -> httpx.Client:
        """A new client of this server with cookies of its own (e.g. a browser tab for `approve`)."""
        if isinstance(self.served, InProcessServer):
            return self.served.client(timeout=15)
        return httpx.Client(base_url=self.url, timeout=15)

    @property
    def resource(self) -> str:
        """The canonical resource URI: the audience every accepted token must carry."""
        return self.settings.resource_url

    @property
    def data_dir(self) -> Path:
        return self.settings.data_dir

    def mint(self, **kwargs: Any) -> str:
        """A token from the test issuer for this server (override `audience` to aim it elsewhere)."""
        assert self.issuer is not None, "this server was started without a TestIssuer"
        kwargs.setdefault("audience", self.resource)
        return self.issuer.mint(**kwargs)

    def post(
        self,
        method: str,
        params: Mapping[str, Any] | None = None,
        *,
        token: str | None = None,
        request_id: Any = 1,
        path: str = "/mcp",
        capabilities: Mapping[str, Any] | None = None,
        **header_overrides: str | None,
    ) -> httpx.Response:
        """One MCP request, with `Authorization: Bearer <token>` when a token is given."""
        body = message(method, params, request_id=request_id, capabilities=capabilities)
        return post(self.http, body, token=token, path=path, **header_overrides)

    def dev_token(
        self,
        *,
        subject: str = "alice",
        tenant: str = "bank-a",
        client_id: str = "aml-mcp-cli",
        scope: str = "aml:read",
        audience: str | None = None,
        ttl: int = 300,
        extra: Mapping[str, Any] | None = None,
    ) -> MintedToken:
        """A token signed by the development issuer's key: the one in this server's data directory,
        or with `database_url` set the one every replica on that database signs with."""
        with open_persistence(self.settings).signing_keys() as keys:
            minter = token_minter(
                keys,
                resource_url=self.resource,
                path=self.settings.auth.dev.path,
                tenant_claim=self.settings.auth.tenant_claim,
            )
            return minter.mint(
                subject=subject,
                tenant=tenant,
                client_id=client_id,
                scopes=scope.split(),
                audience=audience,
                ttl_seconds=ttl,
                extra=extra,
            )

    def audit(self, *, since: int = 0, **match: Any) -> list[dict[str, Any]]:
        return audit_events(self.settings, since=since, **match)

    def audit_mark(self) -> int:
        """The newest audit `seq`, once every event recorded so far is in the store: otherwise an
        event of the previous test still on its way would land after the mark and count as this one's."""
        if self.audit_log is not None:
            self.audit_log.flush()
        return audit_mark(self.settings)

    def wait_for_audit(self, *, since: int = 0, timeout: float = 5.0, **match: Any) -> dict[str, Any]:
        return wait_for_audit(self.settings, since=since, timeout=timeout, **match)

    def audit_file_lines(self) -> list[str]:
        """The lines of `audit.jsonl` once every event recorded so far is written: the flusher writes
        the table first and the file after it, so a row already in the table may not be in the file yet."""
        assert self.audit_log is not None, "only an in-process server can be flushed"
        self.audit_log.flush()
        return (self.data_dir / AUDIT_FILE_NAME).read_text(encoding="utf-8").splitlines()


AUDIT_FLUSH_SECONDS = 0.01
"""How often the servers here hand audit events to the store (0.1 s in production), since tests wait
for the rows."""


def auth_settings(issuers: Sequence[TestIssuer] = (), *, dev: bool = False, **overrides: Any) -> AuthSettings:
    """Auth on, trusting `issuers` (and the dev server if `dev`), JWKS refetch unthrottled for tests."""
    values: dict[str, Any] = {
        "enabled": True,
        "issuers": [issuer.settings for issuer in issuers],
        "dev": DevAuthSettings(enabled=dev),
        "jwks_refetch_interval_seconds": 0.0,
        "revocation_refresh_seconds": 0.2,
        "audit_flush_seconds": AUDIT_FLUSH_SECONDS,
        **overrides,
    }
    return AuthSettings(**values)


@contextlib.contextmanager
def secured_server(
    data_dir: Path,
    catalog: Catalog | None,
    *,
    issuer: TestIssuer | None = None,
    dev: bool = False,
    auth: AuthSettings | None = None,
    real_socket: bool = False,
    **settings_overrides: Any,
) -> Iterator[SecuredServer]:
    """Serve `catalog` (None: the AML tools) with authentication on, trusting `issuer` and/or the dev server.

    In-process unless `real_socket`, which serves it with uvicorn on 127.0.0.1 (a random port).
    """
    shim, metrics = _Deferred(), _Deferred()
    live = LiveServer(shim, beside=metrics) if real_socket else None
    settings = Settings(
        host="127.0.0.1",
        port=live.port if live is not None else DEFAULT_PORT,
        data_dir=data_dir,
        auth=auth or auth_settings([issuer] if issuer else [], dev=dev),
        log_level="warning",
        **settings_overrides,
    )
    app = build_app(settings, catalog=catalog)
    if live is None:
        with InProcessServer(app, port=settings.port) as served, served.client() as http:
            yield SecuredServer(
                served=served, settings=settings, issuer=issuer, http=http, audit_log=app.state.audit
            )
        return
    shim.target, metrics.target = app, app.state.metrics_app
    with live, httpx.Client(base_url=live.url, timeout=15) as http:
        yield SecuredServer(
            served=live, settings=settings, issuer=issuer, http=http, audit_log=app.state.audit
        )


def audit_events(where: Path | Settings, *, since: int = 0, **match: Any) -> list[dict[str, Any]]:
    """Audit rows in the server's store (oldest first, `seq` > `since`) whose columns equal every `match`.

    `where` is the data directory, or the server's settings: with `database_url` set the trail is
    in that database (schema `database_schema`), not in the data directory.
    """
    if isinstance(where, Settings) and where.database_url is not None:
        events = _postgres_audit_rows(where.database_url, where.database_schema, since)
    else:
        events = _sqlite_audit_rows(where.data_dir if isinstance(where, Settings) else where, since)
    for event in events:
        event["detail"] = json.loads(event["detail"]) if event["detail"] else None
    return [e for e in events if all(e.get(k) == v for k, v in match.items())]


_AUDIT_COLUMNS: LiteralString = (
    "seq, time, issuer, subject, tenant, client_id, token_id, method, target, decision, reason, detail"
)


def _sqlite_audit_rows(data_dir: Path, since: int) -> list[dict[str, Any]]:
    path = data_dir / "aml-mcp.db"
    if not path.exists():
        return []
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        conn.row_factory = sqlite3.Row
        try:
            rows = conn.execute(
                f"SELECT {_AUDIT_COLUMNS} FROM audit_events WHERE seq > ? ORDER BY seq",  # noqa: S608
                (since,),
            ).fetchall()
        except sqlite3.OperationalError:
            return []
    finally:
        conn.close()
    return [dict(row) for row in rows]


def _postgres_audit_rows(url: str, schema: str | None, since: int) -> list[dict[str, Any]]:
    options = f"-c search_path={schema}" if schema else ""
    with psycopg.connect(url, options=options, row_factory=dict_row) as conn:
        if conn.execute("SELECT to_regclass('audit_events')").fetchone() == {"to_regclass": None}:
            return []
        return conn.execute(
            "SELECT " + _AUDIT_COLUMNS + " FROM audit_events WHERE seq > %s ORDER BY seq",  # noqa: S608
            (since,),
        ).fetchall()


def audit_mark(where: Path | Settings) -> int:
    """The newest audit `seq` so far: pass it as `since` to see only what happens next."""
    events = audit_events(where)
    return int(events[-1]["seq"]) if events else 0


def wait_for_audit(
    where: Path | Settings, *, since: int = 0, timeout: float = 5.0, **match: Any
) -> dict[str, Any]:
    """The newest audit row matching `match`, waiting for the group commit that writes it."""
    found = eventually(
        lambda: audit_events(where, since=since, **match),
        timeout=timeout,
        what=f"an audit event matching {match}",
    )
    return found[-1]


class _FormFields(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "input" and values.get("type") == "hidden" and values.get("name"):
            self.fields.append((str(values["name"]), values.get("value") or ""))


def consent_form(html: str, username: str, password: str | None, decision: str) -> dict[str, list[str]]:
    """The form a person would submit on the dev server's login/consent page."""
    parser = _FormFields()
    parser.feed(html)
    fields = [
        *parser.fields,
        ("username", username),
        ("password", username if password is None else password),
        ("decision", decision),
    ]
    form: dict[str, list[str]] = {}
    for name, value in fields:
        form.setdefault(name, []).append(value)
    return form


def approve(
    authorization_url: str,
    username: str,
    *,
    password: str | None = None,
    decision: str = "approve",
    browser: httpx.Client | None = None,
) -> str:
    """Log in on the development authorization server and consent; returns the redirect `Location`.

    `browser` is the client to do it with (closed afterwards): by default a new one over real HTTP.
    """
    with browser or httpx.Client(timeout=15, follow_redirects=False) as browser:
        page = browser.get(authorization_url)
        page.raise_for_status()
        answer = browser.post(authorization_url, data=consent_form(page.text, username, password, decision))
    if answer.status_code != 302:
        raise AssertionError(f"consent did not redirect: {answer.status_code} {answer.text[:300]}")
    return answer.headers["location"]


async def approve_async(
    authorization_url: str, username: str, *, password: str | None = None, decision: str = "approve"
) -> str:
    """`approve` for async code (e.g. an MCP client's OAuth redirect handler)."""
    async with httpx.AsyncClient(timeout=15, follow_redirects=False) as browser:
        page = await browser.get(authorization_url)
        page.raise_for_status()
        answer = await browser.post(
            authorization_url, data=consent_form(page.text, username, password, decision)
        )
    if answer.status_code != 302:
        raise AssertionError(f"consent did not redirect: {answer.status_code} {answer.text[:300]}")
    return answer.headers["location"]
