"""The verification cache in front of every verifier: bounded, and never past a token's expiry."""

from __future__ import annotations

import pytest

from aml_mcp.auth.errors import TokenRejected
from aml_mcp.auth.verifier import TokenVerifier
from aml_mcp.principal import Principal
from tests.support.clocks import ManualClock


class CountingVerifier:
    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self.calls = 0

    async def verify(self, token: str) -> Principal:
        self.calls += 1
        return self.principal


@pytest.mark.anyio
async def test_verified_tokens_are_remembered_until_they_expire() -> None:
    clock = ManualClock()
    principal = Principal("iss", "sub", "t", "c", expires_at=clock.now + 60)
    inner = CountingVerifier(principal)
    verifier = TokenVerifier(inner, cache_size=2, clock=clock)
    for _ in range(5):
        assert await verifier.verify("a.b.c") == principal
    assert inner.calls == 1
    clock.now += 61
    await verifier.verify("a.b.c")
    assert inner.calls == 2  # expired entries are verified again (and refused there)
    await verifier.verify("d.e.f")
    await verifier.verify("g.h.i")
    await verifier.verify("a.b.c")
    assert inner.calls == 5  # bounded: the oldest entry was evicted
    with pytest.raises(TokenRejected):
        await verifier.verify("opaque-token")  # no introspection configured


@pytest.mark.anyio
async def test_a_remembered_verification_is_checked_again_once_it_is_as_old_as_the_key_cache() -> None:
    """A client sending one long-lived token must not keep a withdrawn key in use until the token
    expires: after `reverify_after_seconds` (the key cache's lifetime) the signature is checked
    again, against the issuer's keys as they are then."""
    clock = ManualClock()
    principal = Principal("iss", "sub", "t", "c", expires_at=clock.now + 3600)
    inner = CountingVerifier(principal)
    verifier = TokenVerifier(inner, reverify_after_seconds=600, clock=clock)
    await verifier.verify("a.b.c")
    clock.now += 599
    await verifier.verify("a.b.c")
    assert inner.calls == 1
    clock.now += 1
    await verifier.verify("a.b.c")
    assert inner.calls == 2  # checked again, then remembered afresh
    clock.now += 300
    await verifier.verify("a.b.c")
    assert inner.calls == 2
