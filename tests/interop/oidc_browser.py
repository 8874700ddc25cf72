"""The person at the browser for `aml-mcp call --login` against oidc-provider, as `$BROWSER`.

`browser_command(directory)` writes an executable that runs `main(url)`: like a real browser it
returns at once and works in the background (the CLI waits for `$BROWSER` to exit before it
listens). In the background it signs in at the provider as `$LOGIN_USER`, then delivers the
redirect to the CLI's loopback callback. With `$LOGIN_GRANT` (scopes, space-separated) the user
grants only those; with `$LOGIN_FORGE_ISS` set it first replaces the
response's `iss` with that value (an authorization response from a mix-up attack, RFC 9207). What it
saw goes to `$LOGIN_LOG`, one JSON object per sign-in: the authorization request's parameters, the
`iss` the provider sent, and the callback's HTTP status.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import httpx

from tests.support.oidc_provider import sign_in


def browser_command(directory: Path) -> str:
    """An executable for `$BROWSER` that runs `main` with this interpreter and this repository."""
    repository = Path(__file__).resolve().parents[2]
    script = directory / "oidc-browser"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(repository)!r})\n"
        "from tests.interop.oidc_browser import main\n"
        "main(sys.argv[1])\n"
    )
    script.chmod(0o700)
    return str(script)


def _with_iss(location: str, iss: str) -> str:
    parts = urlsplit(location)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    return urlunsplit(parts._replace(query=urlencode({**query, "iss": iss})))


def visit(
    authorization_url: str, username: str, grant: str | None, forged_iss: str | None
) -> dict[str, object]:
    request = {k: v[0] for k, v in parse_qs(urlsplit(authorization_url).query).items()}
    seen: dict[str, object] = {"request": request}
    location = sign_in(authorization_url, username, grant=grant.split() if grant else None)
    seen["iss"] = parse_qs(urlsplit(location).query).get("iss", [None])[0]
    if forged_iss:
        location = _with_iss(location, forged_iss)
    with httpx.Client(timeout=15) as http:
        seen["delivered"] = http.get(location).status_code
    return seen


def main(authorization_url: str) -> None:
    if os.fork() != 0:
        return  # the "browser" has opened the page; the CLI goes on to listen
    try:
        seen = visit(
            authorization_url,
            os.environ["LOGIN_USER"],
            os.environ.get("LOGIN_GRANT"),
            os.environ.get("LOGIN_FORGE_ISS"),
        )
    except Exception as error:  # the test reads the log: a failure here must show there
        seen = {"error": repr(error)}
    with open(os.environ["LOGIN_LOG"], "a") as log:
        log.write(json.dumps(seen) + "\n")
    os._exit(0)
