"""A database fault under any request is the retryable storage error, never "Internal error".

Handlers reach stores of every kind (tasks, notes, baselines, the audit trail) on either backend.
The task service already turns its store's faults into the retryable storage error (-32010); what
any other store raises (a notes query on a terminated connection, a locked SQLite file) would reach
the SDK as an unexpected exception and be answered -32603 "Internal server error", which tells the
client nothing it can act on. `StorageFaultAnswers`, the outermost `Server.middleware`, classifies
whatever a handler raises with `store.faults.storage_fault` and answers a storage fault with the
retryable error, which the HTTP layer sends as 503 with `Retry-After`
(`http.responses.storage_faults_as_503`). Anything else propagates unchanged: a bug stays a bug.

Outages are logged once when they start and once when they end (per method), not per request.
"""

from __future__ import annotations

import logging
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from aml_mcp.protocol.errors import storage_unavailable
from aml_mcp.store.faults import storage_fault
from aml_mcp.store.outage import OutageLog

logger = logging.getLogger(__name__)


class StorageFaultAnswers:
    """`Server.middleware` entry: a handler's storage fault becomes `storage_unavailable(cause)`."""

    def __init__(self) -> None:
        self._outage = OutageLog(
            logger,
            down="{what}: storage unavailable ({cause}: {error}); answered as retryable (503)",
            up="{what}: storage available again (after: {cause})",
        )

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            result = await call_next(ctx)
        except (MCPError, ValidationError):
            raise
        except Exception as error:
            cause = storage_fault(error)
            if cause is None:
                raise
            self._outage.failed(cause, type(error).__name__, what=ctx.method)
            raise storage_unavailable(cause) from error
        self._outage.recovered(what=ctx.method)
        return result
