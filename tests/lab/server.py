"""The server the lab's browser tests and its screenshot script drive: `aml-mcp serve`'s app with its
defaults that matter here — the AML tools, the development authorization server and so the lab — on
a real socket (the browser is a real client), with a small demo corpus."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.tasks.settings import TaskSettings
from tests.support.oauth import SecuredServer, secured_server

NOTES_PER_BANK = 150


@contextlib.contextmanager
def lab_server(data_dir: Path) -> Iterator[SecuredServer]:
    aml = AmlSettings(
        demo_notes_per_tenant=NOTES_PER_BANK, embedder="static"
    )  # search quality is not the point here
    load_demo_if_empty(aml, data_dir)
    tasks = TaskSettings(poll_interval_ms=200, heartbeat_ms=200, lease_ms=2000, claim_interval_ms=500)
    with secured_server(data_dir, None, dev=True, aml=aml, tasks=tasks, real_socket=True) as server:  # type: ignore[arg-type]
        yield server
