"""The minimal login and consent page of the development authorization server.

It shows which client asks, where the browser will be sent back (the redirect host, as the MCP
security considerations require), which resource the token will be for and which scopes, and
lists the demo accounts. The original authorization request rides along in hidden fields, bound
to this server by an HMAC so another site cannot post a consent on the user's behalf.

Every page is sent with `page_headers()`: no other site may frame it (a framed consent page is a
clickjacking target: the user's click on "Approve" lands in someone else's page), it loads nothing
but its one inline style (allowed by its hash; no script at all), and no `Referer` leaves for
another site.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from urllib.parse import urlsplit

from aml_mcp.devauth.users import DemoUser

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:38rem;margin:2rem auto;padding:0 1rem;color:#222}"
    "code{background:#f3f3f3;padding:0 .2rem}table{border-collapse:collapse}"
    "td,th{padding:.2rem .6rem;text-align:left;border-bottom:1px solid #ddd}"
    ".warn{color:#8a4b00}button{margin-right:.5rem;padding:.4rem 1rem}"
)


_STYLE_SOURCE = "'sha256-" + base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode() + "'"
"""The CSP source that allows exactly the pages' inline style element."""

_CSP_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")
"""An origin a CSP source expression can name (IPv6 literals cannot be written in one)."""


def page_headers(consent_redirect_uri: str | None = None) -> dict[str, str]:
    """The security headers of every page (and answer) the issuer sends; for the consent page, pass
    the redirect URI its form's answer will send the browser to.

    `form-action` governs where the consent form may be submitted *and where the answer to that
    submission may redirect* (browsers check redirects after a form post against it): the consent
    page therefore names the client's redirect URI's origin besides its own. When that origin
    cannot be written as a CSP source (an IPv6 loopback literal), the page leaves `form-action` out
    rather than strand the user: the form itself only ever posts to this page.

    The consent page's referrer policy is `same-origin`, every other answer's `no-referrer`: from a
    `no-referrer` page a browser posts its form with `Origin: null`, which the server's DNS-rebinding
    guard refuses, so the person could never sign in. `same-origin` still sends no `Referer` (the
    authorization request's URL) to any other site, the client's callback included.
    """
    form_action = " form-action 'self';"
    referrer_policy = "no-referrer"
    if consent_redirect_uri is not None:
        parts = urlsplit(consent_redirect_uri)
        origin = f"{parts.scheme}://{parts.netloc}"
        form_action = f" form-action 'self' {origin};" if _CSP_ORIGIN.fullmatch(origin) else ""
        referrer_policy = "same-origin"
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src {_STYLE_SOURCE}; base-uri 'none';{form_action}"
            " frame-ancestors 'none'"
        ),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": referrer_policy,
        "X-Content-Type-Options": "nosniff",
    }


def form_signature(secret: bytes, fields: Iterable[tuple[str, str]]) -> str:
    """HMAC over the authorization request's parameters, in order."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for name, value in fields:
        mac.update(name.encode() + b"\x00" + value.encode() + b"\x01")
    return mac.hexdigest()


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )


def error_page(message: str) -> str:
    return _page("Authorization request refused", f"<p>{escape(message)}</p>")


def redirect_offer_page(message: str, location: str) -> str:
    """An error for a client whose redirect URI this server will not follow on its own: the user
    sees where the link leads and decides whether to go back to that application."""
    host = urlsplit(location).hostname or location
    return _page(
        "Authorization request refused",
        f"<p>{escape(message)}</p><p>The application asked to be answered at <code>{escape(host)}</code>. "
        f"<a href='{escape(location)}' rel='noreferrer'>Return to that application</a> only if you "
        "started this sign-in yourself.</p>",
    )


def consent_page(
    *,
    client_name: str,
    client_id: str,
    redirect_uri: str,
    resource: str,
    scope: str,
    fields: Sequence[tuple[str, str]],
    signature: str,
    users: Iterable[DemoUser],
    failed_login: bool = False,
    retry_after: int | None = None,
) -> str:
    redirect_host = urlsplit(redirect_uri).hostname or redirect_uri
    hidden = "".join(
        f"<input type='hidden' name='{escape(name)}' value='{escape(value)}'>" for name, value in fields
    )
    accounts = "".join(
        f"<tr><td><code>{escape(u.username)}</code></td><td>{escape(u.tenant)}</td>"
        f"<td>{escape(' '.join(sorted(u.scopes)))}</td><td>{escape(u.description)}</td></tr>"
        for u in users
    )
    loopback_note = (
        "<p class='warn'>The client asks to be answered on this computer (a loopback address).</p>"
        if redirect_host in {"127.0.0.1", "localhost", "::1"}
        else ""
    )
    failure = "<p class='warn'>Unknown user or wrong password.</p>" if failed_login else ""
    if retry_after is not None:
        failure = (
            f"<p class='warn'>Too many sign-in attempts: try again in {retry_after} seconds. "
            "The password was not checked.</p>"
        )
    body = (
        f"<p><b>{escape(client_name)}</b> (<code>{escape(client_id)}</code>) asks for access.</p>"
        f"<p>Scopes requested: <code>{escape(scope or '(none: the account default)')}</code><br>"
        f"Token for resource: <code>{escape(resource)}</code><br>"
        f"You will be sent back to: <code>{escape(redirect_host)}</code></p>{loopback_note}{failure}"
        f"<form method='post'>{hidden}<input type='hidden' name='consent_mac' value='{escape(signature)}'>"
        "<p><label>User <input name='username' autocomplete='username'></label> "
        "<label>Password <input name='password' type='password' autocomplete='current-password'></label></p>"
        "<p><button name='decision' value='approve'>Approve</button>"
        "<button name='decision' value='deny'>Deny</button></p></form>"
        "<h2>Demo accounts</h2><p>The password is the user name. Scopes a user does not hold are left "
        f"out of the token.</p><table><tr><th>User</th><th>Tenant</th><th>Scopes</th><th></th></tr>{accounts}"
        "</table>"
    )
    return _page("Development authorization server", body)


def request_fields(values: Mapping[str, Sequence[str]], names: Iterable[str]) -> list[tuple[str, str]]:
    """The authorization request parameters worth carrying through the form, in a fixed order."""
    fields: list[tuple[str, str]] = []
    for name in names:
        for value in values.get(name, ()):
            fields.append((name, value))
    return fields
