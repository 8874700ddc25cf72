"""Bearer-token authentication for the client's HTTP requests."""

from __future__ import annotations

from collections.abc import Generator

import httpx2


class BearerAuth(httpx2.Auth):
    """`Authorization: Bearer <token>` on every request. The token is never logged or repr'd."""

    def __init__(self, token: str) -> None:
        if not token or any(c.isspace() for c in token):
            raise ValueError("a bearer token is one non-empty word")
        self._token = token

    def __repr__(self) -> str:
        return "BearerAuth(<token>)"

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = f"Bearer {self._token}"
        yield request
