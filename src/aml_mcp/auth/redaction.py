"""Keeps credentials out of HTTP access logs.

The gate refuses a token sent in the query string, but the access log line is written anyway, with
the full request target. Matching credential parameter names in the raw target is not enough: the
name can be percent-encoded (`access%5Ftoken=`), or the `=` itself (`access_token%3D<token>`), and a
token can sit under any name. So this filter logs no query value at all: each parameter is shown by
its decoded name with the value replaced (`access_token=[redacted]`), a name that is not a short
plain word is replaced too, and anything shaped like a JWT is replaced wherever it appears, the
path included. It runs on uvicorn's access records before any handler formats them, so a
misbehaving client cannot push a token into the logs (invariant: tokens are never stored or logged).
"""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote_plus

REDACTED = "[redacted]"
_JWT = re.compile(r"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_.-]*")
"""A JOSE header always starts `{"`, which base64url-encodes to `eyJ`; what follows up to the
signature is redacted, so a token in the path (or a name) is cut off at its first byte."""
_PLAIN_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-\[\]]{0,31}")
"""Parameter names are short words; anything longer or odder could be a credential posing as a name."""
_DECODE_ROUNDS = 3
"""Names are decoded until stable (a client can encode an encoding), a few rounds at most."""


def _decoded_name(raw: str) -> str:
    name = raw
    for _ in range(_DECODE_ROUNDS):
        decoded = unquote_plus(name)
        if decoded == name:
            break
        name = decoded
    return name


def _redact_parameter(part: str) -> str:
    raw_name, equals, _ = part.partition("=")
    # `access_token%3D<token>` decodes to a name that carries its own `=value`.
    name, decoded_equals, _ = _decoded_name(raw_name).partition("=")
    if not (equals or decoded_equals):
        return REDACTED  # a bare word: could as well be a value (a token) as a name
    shown = name if _PLAIN_NAME.fullmatch(name) else REDACTED
    return f"{shown}={REDACTED}"


def redact_target(target: str) -> str:
    """`target` (path and query, as uvicorn logs it) with every query value and any JWT replaced."""
    path, question, query = target.partition("?")
    if "eyJ" in path:
        path = _JWT.sub(REDACTED, path)
    if not question:
        return path
    parts = re.split(r"[&;]", query)
    return f"{path}?" + "&".join(_redact_parameter(part) for part in parts if part)


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
