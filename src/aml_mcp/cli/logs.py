"""One log format for everything a command prints: ours, uvicorn's and the MCP SDK's.

uvicorn, left to itself, installs its own handlers and formats (`INFO:     Started server
process`) next to the root logger's, so a start-up reads as two differently shaped streams. The
commands configure the root logger once and hand uvicorn no logging configuration of its own
(`log_config=None`), so its loggers propagate to the root and share its format and handler.

The MCP SDK logs "StreamableHTTP session manager started" once per session manager, and the
server runs two (plain JSON responses and SSE streams, `aml_mcp.app`), so the same line appeared
twice at every start and stop. Those lines say nothing the server's own start-up lines do not,
so that logger is kept to warnings and above.
"""

from __future__ import annotations

import logging

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

QUIETED_LOGGERS = ("mcp.server.streamable_http_manager",)
"""Loggers that repeat a line per internal component: kept to warnings and above."""


def configure_logging(level: str | int = logging.INFO) -> None:
    """Route every logger through the root's single handler in `LOG_FORMAT` at `level`."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    for name in QUIETED_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
