"""Credentials in the request target never reach the access log, however they are spelled (L4).

Before, the filter matched `access_token=` in the raw target, so `?access%5Ftoken=<JWT>` (refused by
the gate, which decodes the name) and `?x=1&access_token%3D<JWT>` were logged with the whole token.
Now no query value is logged at all, names are shown decoded, and JWT-shaped text is cut out of
the path too — checked on the filter and in the access log of the real `aml-mcp serve` process.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import jwt
import pytest

from aml_mcp.auth.redaction import CredentialRedactingFilter
from tests.support.raw_http import exchange, request_bytes
from tests.support.subprocess_server import listening_port

TOKEN = jwt.encode(
    {"sub": "mallory", "aud": "x"}, "not-a-real-key-but-long-enough-for-hs256", algorithm="HS256"
)
OPAQUE = "Zq3v9RkP2mW8xT5nL1cB7yH4jD6fG0sA2eU9iO3p"

TARGETS = [
    f"/mcp?access%5Ftoken={TOKEN}",
    f"/mcp?access%5ftoken={TOKEN}",
    f"/mcp?x=1&access_token%3D{TOKEN}",
    f"/mcp?%2561ccess_token={TOKEN}",
    f"/mcp?a=1;access_token={TOKEN}",
    f"/mcp?token={OPAQUE}",
    f"/mcp?{OPAQUE}",
    f"/mcp?{OPAQUE}=",
    f"/mcp/{TOKEN}",
    f"/oauth/authorize?client_id=cli&code_challenge={OPAQUE}&state={OPAQUE}",
]


def _logged(target: str) -> str:
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        __file__,
        1,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", target, "1.1", 400),
        None,
    )
    assert CredentialRedactingFilter().filter(record)
    return record.getMessage()


@pytest.mark.parametrize("target", TARGETS, ids=[f"form{index}" for index in range(len(TARGETS))])
def test_no_credential_form_survives_the_filter(target: str) -> None:
    line = _logged(target)
    assert not any(part in line for part in (*TOKEN.split("."), OPAQUE)), line


def test_encoded_names_are_shown_decoded_with_their_value_redacted() -> None:
    assert _logged(f"/mcp?access%5Ftoken={TOKEN}").endswith(
        '"POST /mcp?access_token=[redacted] HTTP/1.1" 400'
    )
    assert "x=[redacted]&access_token=[redacted]" in _logged(f"/mcp?x=1&access_token%3D{TOKEN}")
    assert "client_id=[redacted]&code_challenge=[redacted]" in _logged(TARGETS[-1])


@pytest.mark.slow
def test_the_served_access_log_never_shows_them(tmp_path: Path) -> None:
    log_path = tmp_path / "server.log"
    env = {**os.environ, "AML_MCP_AML__DEMO_NOTES_PER_TENANT": "2"}
    command = [
        sys.executable,
        "-m",
        "aml_mcp",
        "serve",
        "--port",
        "0",
        "--data-dir",
        str(tmp_path / "d"),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            port = 0
            while True:
                assert proc.poll() is None, log_path.read_text()
                port = port or listening_port(proc.pid)
                try:
                    if port and httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=0.5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.1)
            for target in TARGETS:
                answer = exchange(
                    port, request_bytes(port, "POST", target, [("Content-Type", "application/json")])
                )
                assert answer.status < 500
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
    text = log_path.read_text()
    assert "access_token=[redacted]" in text  # the lines were written, redacted
    assert not any(part in text for part in (*TOKEN.split("."), OPAQUE))
