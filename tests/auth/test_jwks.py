"""Issuer keys: fetched through RFC 8414 metadata, cached, refetched at most once per interval for an
unknown kid, and kept (stale) when the issuer fails — properties that need a clock to provoke."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from aml_mcp.auth.errors import VerifierUnavailable
from aml_mcp.auth.jwks import IssuerKeys, metadata_urls
from tests.support.clocks import ManualClock
from tests.support.oauth import IssuerKey

_EC = ec.generate_private_key(ec.SECP256R1())


def _jwks(*kids: str) -> dict[str, Any]:
    return {"keys": [IssuerKey(kid, "ES256", _EC).public_jwk() for kid in kids]}


@pytest.mark.anyio
async def test_unknown_kid_refetches_at_most_once_per_interval() -> None:
    clock = ManualClock()
    published = ["a"]
    calls = 0

    async def fetch() -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        return _jwks(*published)

    keys = IssuerKeys("iss", fetch, cache_seconds=600, refetch_interval=30, clock=clock)
    assert await keys.candidates("a", "ES256") and calls == 1
    clock.now += 31
    assert not await keys.candidates("nope", "ES256") and calls == 2  # one refetch ...
    for _ in range(20):
        assert not await keys.candidates("nope-too", "ES256")
    assert calls == 2  # ... and no more within the interval
    published.append("b")
    clock.now += 31
    assert await keys.candidates("b", "ES256") and calls == 3  # rotation picked up
    assert not await keys.candidates("a", "RS256")  # an EC key never checks an RSA signature


@pytest.mark.anyio
async def test_key_fetch_failures_fail_closed_without_hammering_the_issuer() -> None:
    clock = ManualClock()
    calls = 0
    healthy = False

    async def fetch() -> Mapping[str, Any]:
        nonlocal calls
        calls += 1
        if not healthy:
            raise httpx.ConnectError("down")
        return _jwks("a")

    keys = IssuerKeys("iss", fetch, cache_seconds=60, refetch_interval=10, clock=clock)
    with pytest.raises(VerifierUnavailable):
        await keys.candidates("a", "ES256")
    with pytest.raises(VerifierUnavailable):
        await keys.candidates("a", "ES256")
    assert calls == 1
    healthy = True
    clock.now += 11
    assert await keys.candidates("a", "ES256")
    healthy = False
    clock.now += 61  # stale; the refetch fails; the old keys stay in use
    assert await keys.candidates("a", "ES256")


def test_metadata_urls_follow_rfc8414_path_insertion() -> None:
    assert metadata_urls("https://id.example/tenant1") == [
        "https://id.example/.well-known/oauth-authorization-server/tenant1",
        "https://id.example/.well-known/openid-configuration/tenant1",
        "https://id.example/tenant1/.well-known/openid-configuration",
    ]
    assert (
        metadata_urls("https://id.example")[0] == "https://id.example/.well-known/oauth-authorization-server"
    )
