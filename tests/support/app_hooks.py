"""Settings `build_app` has no parameter for yet, reached while the app is built.

Each context manager binds a keyword of a function or class the composition root calls (one that
exists for exactly this purpose) for the apps built inside it, and restores it on leaving:

    with task_clock(clock):
        app = build_app(settings, catalog=catalog)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator

import pytest

import aml_mcp.app as app_module
import aml_mcp.audit.wiring as audit_wiring
from aml_mcp.audit.log import AuditLog
from aml_mcp.tasks.clock import Clock
from aml_mcp.tasks.wiring import build_tasks


@contextlib.contextmanager
def task_clock(clock: Clock) -> Iterator[None]:
    """The Tasks extension of apps built inside reads time from `clock` (`build_tasks(clock=...)`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(app_module, "build_tasks", functools.partial(build_tasks, clock=clock))
        yield


@contextlib.contextmanager
def audit_flush(seconds: float) -> Iterator[None]:
    """The audit log of apps built inside hands events to the store every `seconds` (default 0.1 s),
    so tests that wait for an audit row wait that much less (`AuditLog(flush_seconds=...)`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(audit_wiring, "AuditLog", functools.partial(AuditLog, flush_seconds=seconds))
        yield
