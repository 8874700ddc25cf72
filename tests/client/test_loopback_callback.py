"""The loopback listener `--login` signs in with (finding N6 of the second security review), over real
TCP: any local process (or a web page that finds the port) can connect to it, so a connection that
says nothing, a request that is not a callback, and a callback — code or error — without the
pending `state` are answered and ignored, and the wait goes on until the real redirect or the
listener's own deadline. Then the same against the development authorization server: through
`McpClient`, and through `aml-mcp call --login --callback-port` with a `$BROWSER` that attacks first.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import anyio
import httpx
import mcp_types as types
import pytest

from aml_mcp.client import McpClient
from aml_mcp.client.oauth import (
    CONNECTION_SECONDS,
    AuthorizationRefused,
    FileTokenStorage,
    LoopbackCatcher,
    oauth_provider,
)
from tests.client.login_browser import (
    FORGED,
    blocking_browser_command,
    browser_command,
    sign_in_after_attacks,
)
from tests.support.oauth import SecuredServer, secured_server
from tests.support.scoped_catalog import scoped_catalog

STATE = "pending-state-Qx7"
AUTHORIZATION_URL = f"http://127.0.0.1:9/authorize?response_type=code&state={STATE}"
"""What the SDK hands the catcher: only its `state` matters to the listener."""


def _listening(catcher: LoopbackCatcher, visitor: Callable[[str], object]) -> tuple[object, float]:
    """`callback()` (its result or the exception it raised) and how long it took, while `visitor`
    (given the callback's base URL) does things to the listener from another thread."""
    base = catcher.redirect_uri.removesuffix("/callback")

    visiting = threading.Thread(target=visitor, args=(base,), daemon=True)

    async def main() -> tuple[object, float]:
        await catcher.redirect(AUTHORIZATION_URL)
        visiting.start()
        since = time.monotonic()
        try:
            outcome: object = await catcher.callback()
        except Exception as error:
            outcome = error
        return outcome, time.monotonic() - since

    try:
        return anyio.run(main)
    finally:
        visiting.join(timeout=15)  # it reads the last answer after the listener has used it
        catcher.close()


def _catcher(**options: float) -> LoopbackCatcher:
    return LoopbackCatcher(open_browser=lambda _: None, show=lambda _: None, **options)  # type: ignore[arg-type]


def test_a_silent_connection_does_not_hold_up_the_real_redirect() -> None:
    statuses: list[int] = []

    def visit(base: str) -> None:
        idle = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
        try:
            time.sleep(0.2)
            statuses.append(
                httpx.get(f"{base}/callback?code=the-code&state={STATE}&iss=x", timeout=15).status_code
            )
        finally:
            idle.close()

    outcome, elapsed = _listening(_catcher(), visit)
    assert getattr(outcome, "code", None) == "the-code", outcome
    assert statuses == [200]
    assert elapsed < CONNECTION_SECONDS / 2, elapsed  # not after the silent connection timed out


def test_callbacks_without_the_pending_state_are_ignored() -> None:
    statuses: list[int] = []

    def visit(base: str) -> None:
        with httpx.Client(timeout=15) as http:
            statuses.extend(http.get(base + path).status_code for path in FORGED)
            statuses.append(http.get(f"{base}/callback?code=real&state={STATE}").status_code)

    outcome, _ = _listening(_catcher(), visit)
    assert getattr(outcome, "code", None) == "real", outcome
    assert statuses == [400, 400, 400, 200]


def test_requests_that_are_not_callbacks_are_answered_and_ignored() -> None:
    statuses: list[int] = []

    def visit(base: str) -> None:
        port = int(base.rsplit(":", 1)[1])
        for garbage in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", b"\r\n\r\n", b"A" * 40_000):
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(garbage)
        with httpx.Client(timeout=15) as http:
            statuses.append(http.get(f"{base}/favicon.ico").status_code)
            statuses.append(http.post(f"{base}/callback?code=posted&state={STATE}").status_code)
            statuses.append(http.get(f"{base}/callback?code=real&state={STATE}").status_code)

    outcome, _ = _listening(_catcher(), visit)
    assert getattr(outcome, "code", None) == "real", outcome
    assert statuses == [404, 404, 200]


def test_the_authorization_servers_own_refusal_ends_the_wait_at_once() -> None:
    def visit(base: str) -> None:
        httpx.get(f"{base}/callback?error=access_denied", timeout=15)  # forged: ignored
        httpx.get(f"{base}/callback?error=access_denied&state={STATE}", timeout=15)

    outcome, elapsed = _listening(_catcher(), visit)
    assert isinstance(outcome, AuthorizationRefused) and outcome.error == "access_denied", outcome
    assert elapsed < 5, elapsed


def test_the_wait_ends_at_its_own_deadline_not_before() -> None:
    def visit(base: str) -> None:
        idle = socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])))
        httpx.get(f"{base}/callback?error=access_denied", timeout=15)
        time.sleep(3)
        idle.close()

    outcome, elapsed = _listening(_catcher(timeout_seconds=1.5), visit)
    assert isinstance(outcome, TimeoutError), outcome
    assert 1.5 <= elapsed < 4, elapsed


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_callback_port_is_the_one_asked_for() -> None:
    port = _free_port()
    catcher = _catcher_on(port)
    try:
        assert catcher.redirect_uri == f"http://127.0.0.1:{port}/callback"
        with pytest.raises(OSError, match=f"cannot listen for the sign-in on 127.0.0.1:{port}"):
            _catcher_on(port)
    finally:
        catcher.close()


def _catcher_on(port: int) -> LoopbackCatcher:
    return LoopbackCatcher(open_browser=lambda _: None, show=lambda _: None, port=port)


# Against the development authorization server ------------------------------------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("loopback-login"), scoped_catalog(), dev=True, real_socket=True
    ) as s:
        yield s


def test_a_login_attacked_first_by_a_local_process_still_signs_in(
    server: SecuredServer, tmp_path: Path
) -> None:
    seen: list[dict[str, object]] = []

    def open_browser(authorization_url: str) -> bool:
        threading.Thread(
            target=lambda: seen.extend(sign_in_after_attacks(authorization_url, "carol")), daemon=True
        ).start()
        return True

    catcher = LoopbackCatcher(open_browser=open_browser, show=lambda _: None)
    storage = FileTokenStorage(tmp_path / "tokens.json", server.resource)
    provider = oauth_provider(server.resource, storage=storage, catcher=catcher, client_name="test")

    async def main() -> types.CallToolResult:
        async with McpClient(server.resource, auth=provider, mode="2026-07-28") as client:
            result = await client.call_tool("probe_read", {})
            assert isinstance(result, types.CallToolResult)
            return result

    try:
        result = anyio.run(main)
    finally:
        catcher.close()
    assert result.structured_content is not None and result.structured_content["subject"] == "carol"
    assert [entry.get("status") for entry in seen if "forged" in entry] == [400, 400, 400]
    assert {"delivered": 200} in seen


def test_cli_login_with_a_callback_port_survives_a_hostile_local_process(
    server: SecuredServer, tmp_path: Path
) -> None:
    port = _free_port()
    log = tmp_path / "browser.log"
    done = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "call", "probe_read", "--url", server.resource, "--login",
         "--token-cache", str(tmp_path / "tokens.json"), "--callback-port", str(port)],
        env={**{k: v for k, v in os.environ.items() if k != "AML_MCP_TOKEN"},
             "BROWSER": browser_command(tmp_path), "LOGIN_LOG": str(log), "LOGIN_USER": "carol"},
        capture_output=True,
        text=True,
        timeout=90,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    assert done.returncode == 0, (done.stderr, seen)
    assert json.loads(done.stdout)["subject"] == "carol"
    assert seen[0] == {"redirect_uri": f"http://127.0.0.1:{port}/callback"}
    assert [entry["status"] for entry in seen if "forged" in entry] == [400, 400, 400]
    assert seen[-1] == {"delivered": 200}


BROWSER_LINGERS_SECONDS = 120.0
"""How long the blocking `$BROWSER` stays after delivering the redirect: far past the bound below."""
LOGIN_BOUND_SECONDS = 45.0


def test_cli_login_does_not_wait_for_a_browser_command_that_blocks(
    server: SecuredServer, tmp_path: Path
) -> None:
    """A `$BROWSER` that only returns once its page has loaded (and lingers after): the listener
    answers the redirect while the browser command still runs, and the command ends without it."""
    log = tmp_path / "browser.log"
    since = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "call", "probe_read", "--url", server.resource, "--login",
         "--token-cache", str(tmp_path / "tokens.json")],
        env={**{k: v for k, v in os.environ.items() if k != "AML_MCP_TOKEN"},
             "BROWSER": blocking_browser_command(tmp_path, BROWSER_LINGERS_SECONDS),
             "LOGIN_LOG": str(log), "LOGIN_USER": "carol"},
        capture_output=True,
        text=True,
        timeout=LOGIN_BOUND_SECONDS,
        stdin=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip
    took = time.monotonic() - since
    seen = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    for entry in seen:  # the browser still lingers: it is this test's to stop
        if "pid" in entry:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry["pid"]), signal.SIGTERM)
    assert done.returncode == 0, (done.stderr, seen)
    assert json.loads(done.stdout)["subject"] == "carol"
    assert [entry["delivered"] for entry in seen] == [200]
    assert took < LOGIN_BOUND_SECONDS
