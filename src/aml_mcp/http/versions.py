"""Which protocol revision a request speaks, and the refusal that teaches a client to speak ours.

This server serves only the stateless revision (2026-07-28). Most clients still open with the
`initialize` handshake by default: a request without the `MCP-Protocol-Version` header, an
`initialize` without the per-request `_meta` envelope, or a header naming any other revision gets
the spec's `UnsupportedProtocolVersionError` (-32022, HTTP 400) listing the supported revisions —
the only diagnostic a handshake-era client can show its user (versioning: "SHOULD name the
protocol versions it supports in any error it returns to an `initialize` request") — with a
message and a `data.hint` saying which client setting fixes it. A dual-era client recognises the
modern error and retries with a supported revision instead of falling back.

Two cases are left to the protocol layer, whose answers the spec fixes: a modern header whose
envelope names another revision (-32020 `HeaderMismatch`, checked before version support), and
an `initialize` carrying a modern envelope (an unknown method: -32601, HTTP 404).
"""

from __future__ import annotations

from typing import Any

from mcp_types import HEADER_MISMATCH, PROTOCOL_VERSION_META_KEY, UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.responses import Response

from aml_mcp.http.responses import jsonrpc_error, request_id_of

SUPPORTED = list(MODERN_PROTOCOL_VERSIONS)

HINT = (
    f"use protocol revision {', '.join(SUPPORTED)} (stateless: MCP-Protocol-Version header and "
    "per-request _meta, no initialize handshake): TypeScript SDK versionNegotiation {mode: 'auto'}, "
    "MCP Inspector --protocol-era auto, Python SDK Client(..., mode='2026-07-28')"
)


def _envelope_version(message: Any) -> Any:
    """The protocol version the body's `_meta` names (None when there is no envelope or no version)."""
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None


def _handshake_version(message: Any) -> Any:
    """The version an `initialize` request asks for (its `params.protocolVersion`)."""
    if not isinstance(message, dict) or message.get("method") != "initialize":
        return None
    params = message.get("params")
    return params.get("protocolVersion") if isinstance(params, dict) else None


def unsupported_version(message: Any, requested: str, why: str) -> Response:
    """-32022 naming what we serve and how to get a client to speak it."""
    return jsonrpc_error(
        400,
        UNSUPPORTED_PROTOCOL_VERSION,
        f"Unsupported protocol version: {why}; this server speaks MCP {', '.join(SUPPORTED)} only. "
        f"To connect, {HINT}.",
        request_id=request_id_of(message),
        data={"supported": SUPPORTED, "requested": requested, "hint": HINT},
    )


def version_refusal(header: str | None, message: Any) -> Response | None:
    """The refusal for a request that does not speak a revision we serve, or None to go on."""
    envelope = _envelope_version(message)
    if header is None:
        asked = envelope if isinstance(envelope, str) else _handshake_version(message)
        requested = asked if isinstance(asked, str) else ""
        return unsupported_version(message, requested, "the MCP-Protocol-Version header is missing")
    if header in MODERN_PROTOCOL_VERSIONS:
        if isinstance(message, dict) and message.get("method") == "initialize" and envelope is None:
            handshake = _handshake_version(message)
            requested = handshake if isinstance(handshake, str) else header
            return unsupported_version(message, requested, "initialize is a handshake-era request")
        return None
    if envelope is not None and envelope != header:
        return jsonrpc_error(
            400,
            HEADER_MISMATCH,
            "mcp-protocol-version header does not match the request envelope's protocol version",
            request_id=request_id_of(message),
        )
    return unsupported_version(message, header, f"{header!r} is not a revision this server serves")
