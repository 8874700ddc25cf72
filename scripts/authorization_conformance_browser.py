"""Run the official suite's authorization-server scenarios with its browser step played by a script.

`conformance authorization` prints an authorization URL and waits (up to five minutes) for a
person to log in and for the browser to land on its callback server at
`http://127.0.0.1:<port>/callback`. In CI nobody is there, so this driver runs the harness, reads
its output, and when the URL appears does what the person would: loads the development
authorization server's login/consent page, signs in as a demo user, approves, and follows the
redirect to the harness's callback. Everything else (the metadata checks, the state, PKCE and
`iss` checks, the token exchange) is the harness's own.

Usage (the wrapper `scripts/run-authorization-conformance.sh` installs the suite and starts a
server first)::

    python scripts/authorization_conformance_browser.py --user alice -- \\
        node .../conformance/dist/index.js authorization --url ISSUER --client-id aml-mcp-cli ...

The harness's output is passed through; the exit status is the harness's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from html.parser import HTMLParser

import httpx

AUTHORIZE_MARKER = "/authorize?"


class _HiddenFields(HTMLParser):
    """The hidden inputs of the login/consent form (the request it answers, the CSRF token)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "input" and values.get("type") == "hidden" and values.get("name"):
            self.fields.append((str(values["name"]), values.get("value") or ""))


def approve(authorization_url: str, username: str) -> str:
    """Sign in as `username` (the demo password is the user name) and consent; the redirect target."""
    with httpx.Client(timeout=15, follow_redirects=False) as browser:
        page = browser.get(authorization_url)
        page.raise_for_status()
        form = _HiddenFields()
        form.feed(page.text)
        fields: dict[str, list[str]] = {}
        for name, value in [*form.fields, ("username", username), ("password", username)]:
            fields.setdefault(name, []).append(value)
        fields["decision"] = ["approve"]
        answer = browser.post(authorization_url, data=fields)
    if answer.status_code != 302:
        raise RuntimeError(f"the consent page did not redirect: {answer.status_code} {answer.text[:200]}")
    return answer.headers["location"]


def land(location: str, attempts: int = 50) -> None:
    """Follow the redirect to the harness's callback server, as the browser would (the harness
    prints the URL and starts that server concurrently, so a refused connection is retried)."""
    for attempt in range(attempts):
        try:
            httpx.get(location, timeout=15).raise_for_status()
            return
        except httpx.ConnectError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--user", default="alice", help="the demo user who logs in (default alice)")
    parser.add_argument("harness", nargs=argparse.REMAINDER, help="-- then the harness command line")
    args = parser.parse_args()
    command = args.harness[1:] if args.harness[:1] == ["--"] else args.harness
    if not command:
        parser.error("give the harness command after --")
    # The command line is this script's own argument, written by the wrapper script.
    harness = subprocess.Popen(  # noqa: S603
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert harness.stdout is not None
    logins = 0
    for line in harness.stdout:
        sys.stdout.write(line)
        sys.stdout.flush()
        url = line.strip()
        if url.startswith("http") and AUTHORIZE_MARKER in url:
            try:
                land(approve(url, args.user))
                logins += 1
                print(f"[browser] signed in as {args.user} and approved", flush=True)
            except (httpx.HTTPError, RuntimeError) as exc:
                print(f"[browser] could not complete the login: {exc}", flush=True)
                harness.kill()
    status = harness.wait()
    print(f"[browser] logins completed: {logins}", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
