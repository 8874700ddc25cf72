"""Redirect URI rules of the development authorization server: what a client may register, what a
request may name, and where the server may send a browser without the user acting.

Loopback redirect URIs are parsed strictly, by hand rather than through `urlsplit(...).port` and
`.hostname` (which lowercase, strip userinfo and never look at a port that is not asked for): the
authority must be exactly `127.0.0.1`, `localhost` or `[::1]`, optionally followed by a decimal
port from 1 to 65535 with no leading zero. Anything else (`:abc`, `:0`, `:99999`, a bare `:`,
`user@127.0.0.1`, `LOCALHOST`, `127.1`) is not a loopback redirect URI at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

_LOOPBACK_AUTHORITY = re.compile(r"(?P<host>127\.0\.0\.1|localhost|\[::1\])(?::(?P<port>[1-9][0-9]{0,4}))?")
_HOST_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?|\[[0-9A-Fa-f:.]+\]")
_FORBIDDEN_CHARACTERS = re.compile(r"[\x00-\x20\x7f-\x9f\\]")


@dataclass(frozen=True, slots=True)
class LoopbackRedirect:
    """A strictly parsed `http` loopback redirect URI (RFC 8252 §7.3)."""

    host: str
    port: int | None
    path: str
    query: str


def _split(uri: str) -> SplitResult | None:
    if _FORBIDDEN_CHARACTERS.search(uri):
        return None
    try:
        return urlsplit(uri)
    except ValueError:
        return None


def loopback_redirect(uri: str) -> LoopbackRedirect | None:
    """The parts of an `http` loopback redirect URI, or None if `uri` is not exactly one."""
    parts = _split(uri)
    if parts is None or parts.scheme != "http" or parts.fragment or "#" in uri:
        return None
    match = _LOOPBACK_AUTHORITY.fullmatch(parts.netloc)
    if match is None:
        return None
    port = int(match["port"]) if match["port"] else None
    if port is not None and port > 65_535:
        return None
    return LoopbackRedirect(match["host"], port, parts.path, parts.query)


def _https_authority_is_valid(netloc: str) -> bool:
    """`host[:port]` with a plain host name or bracketed IPv6 literal: no userinfo, numeric port."""
    host = netloc
    if not netloc.endswith("]") and ":" in netloc:
        host, _, port = netloc.rpartition(":")
        if not re.fullmatch(r"[1-9][0-9]{0,4}", port) or int(port) > 65_535:
            return False
    return bool(_HOST_NAME.fullmatch(host))


def acceptable_redirect_uri(uri: object, *, max_chars: int = 2_000) -> bool:
    """What a client may register (MCP): an https URI, or http on an exact loopback authority.

    No fragment, no userinfo, no whitespace or control characters, a numeric port, and no longer
    than `max_chars`.
    """
    if not isinstance(uri, str) or not uri or len(uri) > max_chars:
        return False
    if loopback_redirect(uri) is not None:
        return True
    parts = _split(uri)
    if parts is None or parts.scheme != "https" or parts.fragment or "#" in uri:
        return False
    return _https_authority_is_valid(parts.netloc)


def redirect_matches(registered: str, presented: str) -> bool:
    """Exact match (of a well-formed URI: clients stored before these rules may hold others), except
    that a registered loopback URI without a port accepts any valid port (RFC 8252 §7.3) on the
    same host form, path and query."""
    if registered == presented:
        return acceptable_redirect_uri(presented, max_chars=65_536)
    want, got = loopback_redirect(registered), loopback_redirect(presented)
    return (
        want is not None
        and got is not None
        and want.port is None
        and (want.host, want.path, want.query) == (got.host, got.path, got.query)
    )


def redirects_without_asking(uri: str) -> bool:
    """Whether an error may be sent to this (already validated) redirect URI before the user acts.

    Only loopback URIs: they lead back to an application on the user's own machine. Anyone can
    register an https redirect URI, so sending errors there automatically would make this server
    an open redirector to any site (RFC 9700 §4.11.2); the user is shown the error instead.
    """
    return loopback_redirect(uri) is not None
