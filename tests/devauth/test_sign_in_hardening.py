"""The sign-in and consent page cannot be framed and cannot be guessed at (review finding I1).

Over real HTTP against the whole app: the page answers with anti-framing headers and a CSP that
allows exactly its own inline style; the review's probe (60 wrong passwords for carol, then the
right one) now meets 429s with `Retry-After`, and the right password is refused while the backoff
lasts, then accepted once it is over, which also resets carol's count. One address spraying
passwords over users (existing or not) is backed off too. The limiter's counts are in the issuer's
store: `test_replicas_on_postgres.py` shows them shared by two replicas.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest

from aml_mcp.devauth.wiring import CLI_CLIENT_ID
from tests.support.dev_issuer import dev_issuer_server, pkce
from tests.support.oauth import SecuredServer, consent_form

CALLBACK = "http://127.0.0.1:5555/callback"
"""The review probe's redirect URI (the command-line client accepts any loopback port)."""

SECURITY_HEADERS = {"x-frame-options": "DENY", "x-content-type-options": "nosniff"}
CONSENT_PAGE = "same-origin"
"""The consent page's referrer policy: a browser posts a form from a `no-referrer` page with
`Origin: null`, which the server refuses (`test_sign_in_browser.py` signs in with Chromium)."""


BACKOFF_SECONDS = 3.0
"""The first backoff here (1 s by default): long enough that no attempt of a burst, however slow
the machine, arrives after it ended, so the probe's answers are exact."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SecuredServer]:
    with dev_issuer_server(tmp_path, login_backoff_base_seconds=BACKOFF_SECONDS) as running:
        yield running


def _authorize_url(server: SecuredServer, redirect_uri: str = CALLBACK) -> str:
    _, challenge = pkce()
    query = {
        "response_type": "code",
        "client_id": CLI_CLIENT_ID,
        "redirect_uri": redirect_uri,
        "scope": "aml:read",
        "state": "s",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    return f"{server.url}/oauth/authorize?{urlencode(query)}"


def _directives(policy: str) -> dict[str, str]:
    return {
        name: value.strip()
        for name, _, value in (part.strip().partition(" ") for part in policy.split(";"))
        if name
    }


def _assert_page_headers(answer: httpx.Response, referrer: str = "no-referrer") -> dict[str, str]:
    for name, value in {**SECURITY_HEADERS, "referrer-policy": referrer}.items():
        assert answer.headers.get(name) == value, (name, answer.status_code, dict(answer.headers))
    policy = _directives(answer.headers["content-security-policy"])
    assert policy["frame-ancestors"] == "'none'"
    assert policy["default-src"] == "'none'"
    assert "script-src" not in policy  # no script at all: default-src 'none' governs it
    return policy


def _style_source(html: str) -> str:
    styles = re.findall(r"<style>(.*?)</style>", html, flags=re.S)
    assert len(styles) == 1
    digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
    return f"'sha256-{digest}'"


def test_the_consent_page_sends_anti_framing_headers_and_a_tight_csp_on_get_and_post(
    server: SecuredServer,
) -> None:
    url = _authorize_url(server)
    with httpx.Client(timeout=15) as browser:
        page = browser.get(url)
        assert page.status_code == 200
        policy = _assert_page_headers(page, CONSENT_PAGE)
        # Exactly the page's own inline style is allowed, and it has no script of any kind.
        assert policy["style-src"] == _style_source(page.text)
        assert "<script" not in page.text.lower() and not re.search(r"\son[a-z]+=", page.text)
        # The form posts to the page itself; the answer to it may redirect to the client's origin.
        assert "action=" not in page.text
        assert policy["form-action"].split() == ["'self'", "http://127.0.0.1:5555"]

        wrong = browser.post(url, data=consent_form(page.text, "carol", "wrong", "approve"))
        assert wrong.status_code == 401
        _assert_page_headers(wrong, CONSENT_PAGE)
        approved = browser.post(url, data=consent_form(page.text, "carol", None, "approve"))
        assert approved.status_code == 302 and approved.headers["location"].startswith(CALLBACK)
        _assert_page_headers(approved)


def test_every_other_answer_of_the_issuer_carries_the_headers(server: SecuredServer) -> None:
    with httpx.Client(base_url=server.url, timeout=15) as http:
        answers = [
            http.get("/oauth/authorize?client_id=nobody"),  # the error page
            http.post("/oauth/authorize", data={"consent_mac": "forged"}),  # a forged form
            http.post("/oauth/token", data={"grant_type": "authorization_code", "code": "x"}),
            http.get("/oauth/jwks.json"),
            http.get("/.well-known/oauth-authorization-server/oauth"),
        ]
    assert [answer.status_code for answer in answers] == [400, 400, 401, 200, 200]
    for answer in answers:
        policy = _assert_page_headers(answer)
        assert policy.get("form-action") == "'self'"


def test_an_ipv6_loopback_client_is_not_stranded_by_form_action(server: SecuredServer) -> None:
    """A CSP source cannot name `[::1]`: the page leaves `form-action` out rather than have the
    browser block the redirect back to the client."""
    with httpx.Client(timeout=15) as browser:
        page = browser.get(_authorize_url(server, "http://[::1]:5555/callback"))
    assert page.status_code == 200
    assert "form-action" not in _assert_page_headers(page, CONSENT_PAGE)


def _post(browser: httpx.Client, url: str, fields_from: str, user: str, password: str) -> httpx.Response:
    return browser.post(url, data=consent_form(fields_from, user, password, "approve"))


def test_the_review_probe_sixty_wrong_passwords_then_the_right_one_is_backed_off(
    server: SecuredServer,
) -> None:
    url = _authorize_url(server)
    with httpx.Client(timeout=15) as browser:
        page = browser.get(url).text
        statuses: list[int] = []
        for number in range(60):
            answer = _post(browser, url, page, "carol", f"wrong{number}")
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                assert int(answer.headers["retry-after"]) >= 1
                assert "Too many sign-in attempts" in answer.text
                _assert_page_headers(answer, CONSENT_PAGE)
        # Five attempts are checked; the backoff refuses all the rest without checking them.
        assert statuses == [401] * 5 + [429] * 55, statuses
        right = _post(browser, url, page, "carol", "carol")
        assert right.status_code == 429, "the right password must be refused during the backoff"
        assert 1 <= int(right.headers["retry-after"]) <= BACKOFF_SECONDS
        assert "location" not in right.headers
        # Once the backoff is over, the right password signs carol in and her count starts afresh.
        time.sleep(int(right.headers["retry-after"]) + 0.2)
        signed_in = _post(browser, url, page, "carol", "carol")
        assert signed_in.status_code == 302 and signed_in.headers["location"].startswith(CALLBACK)
        again = [_post(browser, url, page, "carol", "wrong").status_code for _ in range(4)]
        assert again == [401] * 4


def test_one_address_spraying_passwords_over_users_is_backed_off(server: SecuredServer) -> None:
    url = _authorize_url(server)
    with httpx.Client(timeout=15) as browser:
        page = browser.get(url).text
        # Users that do not exist count for the address only (20 attempts by default).
        statuses = [_post(browser, url, page, f"nobody{n}", "guess").status_code for n in range(20)]
        assert statuses == [401] * 20
        sprayed = _post(browser, url, page, "alice", "guess")
        assert sprayed.status_code == 429 and int(sprayed.headers["retry-after"]) >= 1
        # From this address even alice's right password waits (the attacker may be guessing it).
        assert _post(browser, url, page, "alice", "alice").status_code == 429
