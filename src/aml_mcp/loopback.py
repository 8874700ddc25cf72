"""What counts as this machine: the one loopback rule shared by settings, the Host guard and the dev issuer.

Several safety rules hinge on it (authentication may be off only on loopback, plain http is
allowed only to loopback, the DNS-rebinding guard always accepts loopback names), so it is stated
once.
"""

from __future__ import annotations

import ipaddress

LOOPBACK_HOSTS: tuple[str, ...] = ("127.0.0.1", "localhost", "[::1]")
"""Host names (as they appear in a `Host` header or URL authority) that always mean this machine."""


def is_loopback_host(host: str | None) -> bool:
    """`localhost`, or an IPv4/IPv6 loopback address (brackets allowed)."""
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
