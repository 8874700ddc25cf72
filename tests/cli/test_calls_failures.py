"""`aml-mcp call` and `aml-mcp task` fail in one line (finding N9 of the second security review):
an expired, foreign or malformed token, a token without the scope, a server that is down, a sign-in
that cannot happen, and bad arguments each end the real command, run in a child process against a
real server on 127.0.0.1, with one line on stderr and the documented exit status; `--debug` adds
the traceback."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.oauth import SecuredServer, TestIssuer, secured_server
from tests.support.scoped_catalog import scoped_catalog

EXIT_USAGE = 2
EXIT_PROTOCOL = 6


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, issuer: TestIssuer) -> Iterator[SecuredServer]:
    with secured_server(
        tmp_path_factory.mktemp("cli-failures"), scoped_catalog(), issuer=issuer, real_socket=True
    ) as running:
        yield running


def _call(url: str, *args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AML_MCP_TOKEN"}
    if token is not None:
        env["AML_MCP_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "aml_mcp", *args, "--url", url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("aml-mcp: "), done.stderr
    return lines[0]


def test_an_expired_token_is_one_line_and_exit_6(server: SecuredServer) -> None:
    hours_ago = int(time.time()) - 7200
    expired = server.mint(scope="aml:read", ttl=-3600, iat=hours_ago, nbf=hours_ago)
    done = _call(f"{server.url}/mcp", "call", "probe_read", token=expired)
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    line = _one_line(done)
    assert "expired" in line and "refused the token" in line and expired not in done.stderr
    assert done.stdout == ""


def test_a_token_for_another_server_is_one_line_and_exit_6(server: SecuredServer) -> None:
    foreign = server.mint(scope="aml:read", audience="https://another-server.example/mcp")
    done = _call(f"{server.url}/mcp", "task", "get", "some-task", token=foreign)
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert "refused the token" in _one_line(done)


def test_a_malformed_token_is_one_line_and_exit_6(server: SecuredServer) -> None:
    done = _call(f"{server.url}/mcp", "call", "probe_read", token="not-a-jwt")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert "refused the token" in _one_line(done) and "not-a-jwt" not in done.stderr


def test_no_token_is_one_line_naming_the_ways_to_give_one(server: SecuredServer) -> None:
    done = _call(f"{server.url}/mcp", "call", "probe_read")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    line = _one_line(done)
    assert "--token" in line and "AML_MCP_TOKEN" in line and "--login" in line


def test_a_token_without_the_scope_is_one_line_and_exit_6(server: SecuredServer) -> None:
    done = _call(f"{server.url}/mcp", "call", "probe_eval", token=server.mint(scope="aml:read"))
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert "aml:eval" in _one_line(done)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_a_server_that_is_down_is_one_line_and_exit_6() -> None:
    url = f"http://127.0.0.1:{_free_port()}/mcp"
    done = _call(url, "call", "probe_read", token="any")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    line = _one_line(done)
    assert line.startswith(f"aml-mcp: cannot reach {url}")


def test_debug_prints_the_traceback_before_the_line(server: SecuredServer) -> None:
    done = _call(f"{server.url}/mcp", "call", "probe_read", "--debug", token="not-a-jwt")
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert "Traceback" in done.stderr
    assert done.stderr.splitlines()[-1].startswith("aml-mcp: ") and "refused the token" in done.stderr


def test_login_that_cannot_sign_in_is_one_line_never_a_traceback(
    server: SecuredServer, tmp_path: os.PathLike[str]
) -> None:
    """This server trusts an issuer that offers neither registration nor a client ID document, so
    the SDK's OAuth flow gives up (`OAuthFlowError` or one of its kind)."""
    done = _call(
        f"{server.url}/mcp", "call", "probe_read", "--login", "--token-cache", f"{tmp_path}/tokens.json"
    )
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    assert "sign-in" in _one_line(done) and "Traceback" not in done.stderr


def test_bad_arguments_are_one_line_and_exit_2(server: SecuredServer) -> None:
    done = _call(f"{server.url}/mcp", "call", "probe_read", "--max-answer-bytes", "-1")
    assert done.returncode == EXIT_USAGE, done.stderr
    line = done.stderr.strip()
    assert "\n" not in line and "--max-answer-bytes" in line and "--help" in line
    missing = subprocess.run(
        [sys.executable, "-m", "aml_mcp", "task", "get", "x"], capture_output=True, text=True, check=False
    )
    assert missing.returncode == EXIT_USAGE and missing.stderr.count("\n") == 1, missing.stderr
    assert "--url" in missing.stderr


def test_a_closed_stdout_is_not_blamed_on_the_server(server: SecuredServer) -> None:
    """`aml-mcp call ... | head -c0`: the reader is gone before the result is written."""
    reader, writer = os.pipe()
    os.close(reader)
    env = {**os.environ, "AML_MCP_TOKEN": server.mint(scope="aml:read")}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "aml_mcp", "call", "probe_read", "--url", f"{server.url}/mcp"],
            env=env, stdout=writer, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
        )  # fmt: skip
    finally:
        os.close(writer)
    assert done.returncode == 141, done.stderr
    assert done.stderr == ""


class _Redirecting(http.server.BaseHTTPRequestHandler):
    """Answers every request with a redirect to another origin, as a misconfigured proxy might."""

    def _redirect(self) -> None:
        self.send_response(307)
        self.send_header("Location", "https://elsewhere.example/mcp")
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _redirect

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_redirect_the_client_does_not_follow_is_one_line_and_exit_6() -> None:
    with http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting) as redirecting:
        threading.Thread(target=redirecting.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{redirecting.server_address[1]}/mcp"
            done = _call(url, "call", "probe_read", token="any")
        finally:
            redirecting.shutdown()
    assert done.returncode == EXIT_PROTOCOL, done.stderr
    line = _one_line(done)
    assert "redirect" in line.lower() and "elsewhere.example" in line
