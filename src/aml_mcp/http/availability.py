"""Fail closed while a precondition of serving is unmet: the admission refuses every call with 503.

The audit trail is a compliance control: a call whose decision cannot be recorded must not be
made. `RefuseWhileUnavailable` wraps the endpoint's `Admission` and asks `unavailable()` before
anything else; while it names a reason, every request gets `503 Service Unavailable` with a
JSON-RPC error and `Retry-After`, and nothing further runs (no token check, no tool). When the
reason clears — the audit log retries its writes by itself — requests are admitted again. The
reason is logged for the operator (at most every `LOG_INTERVAL_SECONDS`), never sent to the
caller.

A database fault under one request is answered the same way (`responses.storage_faults_as_503`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from mcp_types import INTERNAL_ERROR
from starlette.requests import Request
from starlette.responses import Response

from aml_mcp.http.endpoint import Admission
from aml_mcp.http.responses import jsonrpc_error, request_id_of
from aml_mcp.principal import Principal

logger = logging.getLogger(__name__)

LOG_INTERVAL_SECONDS = 10.0
RETRY_AFTER_SECONDS = 2


class RefuseWhileUnavailable:
    """An `Admission` that refuses everything while `unavailable()` returns a reason (module docstring)."""

    def __init__(
        self,
        admission: Admission,
        unavailable: Callable[[], str | None],
        *,
        message: str = "Service unavailable: the audit trail cannot be written; retry later",
    ) -> None:
        self.admission = admission
        self.unavailable = unavailable
        self.message = message
        self.refused = 0
        """Requests refused since start (observable; the refusals themselves cannot be audited)."""
        self._logged_at = float("-inf")

    async def admit(self, request: Request, message: Any) -> Principal | Response:
        reason = self.unavailable()
        if reason is None:
            return await self.admission.admit(request, message)
        self.refused += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_INTERVAL_SECONDS:
            self._logged_at = now
            logger.error("refusing requests (%d so far): %s", self.refused, reason)
        return jsonrpc_error(
            503,
            INTERNAL_ERROR,
            self.message,
            request_id=request_id_of(message),
            headers={"Retry-After": str(RETRY_AFTER_SECONDS), "Cache-Control": "no-store"},
        )
