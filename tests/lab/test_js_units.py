"""The lab's JavaScript units (the SSE parser, the audit folding, the task history, the authorization
flow, the page's time formats) under Node's own test runner, so `./dev test` runs them: `node --test`
on `tests/lab/js/`. Node.js is needed (`apt-get install nodejs`); its absence fails, never skips."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

UNITS = Path(__file__).parent / "js"


def node() -> str:
    path = os.environ.get("AML_MCP_NODE") or shutil.which("node")
    if not path:
        pytest.fail("Node.js is needed for the lab's JavaScript unit tests: apt-get install nodejs")
    return path


def test_the_lab_javascript_units_pass() -> None:
    files = sorted(str(path) for path in UNITS.glob("*.test.mjs"))
    assert len(files) >= 5, files
    run = subprocess.run(
        [node(), "--test", *files],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
    assert "# fail 0" in run.stdout, run.stdout[-2000:]
