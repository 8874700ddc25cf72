"""Access-log redaction: a token sent in a query string never reaches the log."""

from __future__ import annotations

import logging

from aml_mcp.auth.redaction import CredentialRedactingFilter


def test_access_log_lines_never_carry_a_query_string_token() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "POST", "/mcp?a=1&Access_Token=eyJ.secret.sig", "1.1", 400), None,
    )  # fmt: skip
    assert CredentialRedactingFilter().filter(record)
    assert (
        "eyJ" not in record.getMessage() and "access_token=[redacted]".lower() in record.getMessage().lower()
    )
