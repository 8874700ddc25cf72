"""Flawed copies of the caller's own token, for the authorization simulation.

Each copy differs from the caller's verified token in exactly one way — the audience names another
server, it expired an hour ago, it grants no scope, or it belongs to an analyst of another bank —
so the page can show the server refusing each one. Only the development authorization server can
sign them (it holds the key); with any other issuer the simulation offers only the request with no
token at all. The ids of the tokens minted for a caller are remembered (a bounded number per
caller, in memory), because they are what lets the audit view show the caller the records those
tokens produced even where the server could not attribute them to a bank.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from aml_mcp.principal import Owner, Principal

ELSEWHERE = "https://another-server.example/mcp"
"""The audience of the wrong-audience token: a resource this server is not."""

_IDS_PER_CALLER = 64
_CALLERS = 1_000


class MintToken(Protocol):
    """Signs a token with the development issuer's key; returns the token and its `jti`."""

    def __call__(
        self,
        *,
        subject: str,
        tenant: str,
        client_id: str,
        scopes: Sequence[str],
        audience: str | None = None,
        claims: dict[str, Any] | None = None,
    ) -> tuple[str, str]: ...


@dataclass(frozen=True, slots=True)
class FlawedToken:
    kind: str
    token: str
    token_id: str
    flaw: str
    """One sentence for the page: what is wrong with this token."""


class Simulation:
    """Mints the flawed tokens and remembers, per caller, which token ids were theirs."""

    def __init__(self, mint: MintToken, *, banks: Sequence[str]) -> None:
        self._mint = mint
        self._banks = list(banks)
        self._issued: OrderedDict[Owner, deque[str]] = OrderedDict()

    def other_bank(self, tenant: str) -> str:
        return next((bank for bank in self._banks if bank != tenant), f"not-{tenant}")

    def tokens_for(self, caller: Principal) -> list[FlawedToken]:
        scopes = sorted(caller.scopes)
        now = int(time.time())
        other = self.other_bank(caller.tenant)
        plan: list[tuple[str, str, dict[str, Any]]] = [
            ("wrong_audience", f"its audience is {ELSEWHERE}, not this server", {"audience": ELSEWHERE}),
            (
                "expired",
                "it expired an hour ago",
                {"claims": {"iat": now - 7_200, "nbf": now - 7_200, "exp": now - 3_600}},
            ),
            ("no_scope", "it grants no scope at all", {"scopes": []}),
            (
                "other_bank",
                f"it is a valid token of an analyst at {other}, another bank",
                {"subject": f"{caller.subject}-at-{other}", "tenant": other},
            ),
        ]
        minted = []
        for kind, flaw, changes in plan:
            token, token_id = self._mint(
                subject=changes.get("subject", caller.subject),
                tenant=changes.get("tenant", caller.tenant),
                client_id=caller.client_id,
                scopes=changes.get("scopes", scopes),
                audience=changes.get("audience"),
                claims=changes.get("claims"),
            )
            minted.append(FlawedToken(kind, token, token_id, flaw))
        self._remember(caller.owner, [token.token_id for token in minted])
        return minted

    def issued_to(self, caller: Principal) -> list[str]:
        return list(self._issued.get(caller.owner, ()))

    def _remember(self, owner: Owner, token_ids: list[str]) -> None:
        ids = self._issued.pop(owner, None) or deque(maxlen=_IDS_PER_CALLER)
        ids.extend(token_ids)
        self._issued[owner] = ids
        while len(self._issued) > _CALLERS:
            self._issued.popitem(last=False)
