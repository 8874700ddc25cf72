"""Keeps credentials out of HTTP access logs.

The gate refuses a token sent in the query string, but the access log line is written anyway, with
the full request target. This filter blanks the values of credential-bearing query parameters in
uvicorn's access records before any handler formats them, so a misbehaving client cannot push a
token into the logs (invariant: tokens are never stored or logged).
"""

from __future__ import annotations

import logging
import re

_CREDENTIAL_PARAM = re.compile(
    r"(?i)((?:^|[?&;])(?:access_token|refresh_token|client_secret|code)=)[^&;#\s]*"
)
REDACTED = "[redacted]"


def redact_target(target: str) -> str:
    """`target` with the values of credential query parameters replaced."""
    return _CREDENTIAL_PARAM.sub(rf"\1{REDACTED}", target) if "=" in target else target


class CredentialRedactingFilter(logging.Filter):
    """For uvicorn's access logger, whose record args are (client, method, target, http version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            record.args = (*args[:2], redact_target(args[2]), *args[3:])
        return True


def install_access_log_redaction(logger_name: str = "uvicorn.access") -> None:
    """Attach the filter once (idempotent), before the server starts logging."""
    log = logging.getLogger(logger_name)
    if not any(isinstance(existing, CredentialRedactingFilter) for existing in log.filters):
        log.addFilter(CredentialRedactingFilter())
