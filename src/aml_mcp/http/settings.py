"""The `http` settings group (`AML_MCP_HTTP__<NAME>` in the environment): what one request and one
connection may cost the server before any route runs.

Every limit here is enforced at the edge, before authentication, so an anonymous client can make
the server hold no more memory, time or connections than these numbers allow.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KIB = 1024


class HttpSettings(BaseModel):
    """Limits on request heads, request bodies' shape, slow clients and open connections."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_header_count: int = Field(default=100, ge=16, le=10_000)
    """Most header fields one request may carry; more is refused with 431 on every route, before
    anything reads them (building a header mapping is quadratic in the SDK)."""
    max_header_bytes: int = Field(default=32 * KIB, ge=4 * KIB, le=1024 * KIB)
    """Most bytes of request line and header fields together. The HTTP parser stops buffering a
    longer head and answers 431, so a client that never ends its headers holds at most this much."""
    max_json_depth: int = Field(default=64, ge=8, le=512)
    """Deepest nesting of arrays and objects in an /mcp body (the envelope counts); deeper bodies
    are a parse error (-32700), refused before anything validates or stores them."""
    request_read_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    """How long a client has to send one whole request (line, headers and body), counted from the
    moment it opened the connection or began its next request; then the connection is closed (408
    while no response has begun). A client that trickles bytes cannot hold a connection longer."""
    max_connections: int = Field(default=768, ge=1)
    """Open connections (listen streams included) beyond which a new request is answered 503 at
    once, so clients cannot exhaust file descriptors (the default stays below the common soft
    limit of 1024 open files, with room for the stores and logs)."""
