"""A person's browser, and a hostile local process beside it, for `aml-mcp call --login` (finding N6).

`$BROWSER` is an executable that runs `main(url)` (see `browser_command`): like a real browser it
returns at once and works in the background. There it first pokes at the CLI's loopback listener as
any local process or web page could — a connection that never says anything, a forged
`?error=access_denied` without a state and with a wrong one, a code with a wrong state — then signs
in on the development authorization server as `$LOGIN_USER` and delivers the real redirect. What it
saw goes to `$LOGIN_LOG`, one JSON object per line. `blocking_browser_command` is one that does not
return until its page has loaded (a text browser, a script).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx

from tests.support.oauth import approve

FORGED = (
    "/callback?error=access_denied",
    "/callback?error=access_denied&state=forged",
    "/callback?code=stolen&state=forged",
)


def browser_command(directory: Path) -> str:
    """An executable for `$BROWSER` that runs `main` with this interpreter and this repository."""
    repository = Path(__file__).resolve().parents[2]
    script = directory / "login-browser"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(repository)!r})\n"
        "from tests.client.login_browser import main\n"
        "main(sys.argv[1])\n"
    )
    script.chmod(0o700)
    return str(script)


def sign_in_after_attacks(authorization_url: str, username: str) -> list[dict[str, object]]:
    """Poke at the listener `authorization_url` redirects to, then sign in and deliver the redirect;
    what happened, in order."""
    seen: list[dict[str, object]] = []
    redirect = urlsplit(parse_qs(urlsplit(authorization_url).query)["redirect_uri"][0])
    callback = f"http://{redirect.netloc}"
    seen.append({"redirect_uri": redirect.geturl()})
    idle = socket.create_connection((redirect.hostname or "127.0.0.1", redirect.port or 80))
    try:
        with httpx.Client(timeout=15) as http:
            for path in FORGED:
                seen.append({"forged": path, "status": http.get(callback + path).status_code})
            time.sleep(0.2)  # the idle connection is still open when the real redirect arrives
            location = approve(authorization_url, username)
            seen.append({"delivered": http.get(location).status_code})
    finally:
        idle.close()
    return seen


def main(authorization_url: str) -> None:
    if os.fork() != 0:
        return  # the "browser" has opened the page; the CLI goes on to listen
    try:
        seen = sign_in_after_attacks(authorization_url, os.environ.get("LOGIN_USER", "carol"))
    except Exception as error:  # the test reads the log: a failure here must show there
        seen = [{"error": repr(error)}]
    with open(os.environ["LOGIN_LOG"], "a") as log:
        log.writelines(json.dumps(entry) + "\n" for entry in seen)
    os._exit(0)


def blocking_browser_command(directory: Path, linger_seconds: float) -> str:
    """An executable for `$BROWSER` that behaves like a browser the CLI has to wait for (a text
    browser, a script): in the foreground it signs in as `$LOGIN_USER`, delivers the redirect and
    waits for the listener's answer, then stays `linger_seconds` more before it exits."""
    repository = Path(__file__).resolve().parents[2]
    script = directory / "blocking-browser"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        f"sys.path.insert(0, {str(repository)!r})\n"
        "from tests.client.login_browser import blocking_main\n"
        f"blocking_main(sys.argv[1], {linger_seconds!r})\n"
    )
    script.chmod(0o700)
    return str(script)


def blocking_main(authorization_url: str, linger_seconds: float) -> None:
    # Off the CLI's stdout and stderr, so the test's pipes end with the CLI, not with this browser.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        location = approve(authorization_url, os.environ.get("LOGIN_USER", "carol"))
        with httpx.Client(timeout=60) as http:
            seen: dict[str, object] = {"delivered": http.get(location).status_code, "pid": os.getpid()}
    except Exception as error:  # the test reads the log: a failure here must show there
        seen = {"error": repr(error)}
    with open(os.environ["LOGIN_LOG"], "a") as log:
        log.write(json.dumps(seen) + "\n")
    time.sleep(linger_seconds)
