"""The two things the official SDK's `OAuthClientProvider` needs from its host, for tests that drive
it against the development authorization server: token storage, and a user at the browser."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from tests.support.oauth import approve_async


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory (`client_info`: a pre-registered client)."""

    def __init__(self, client_info: OAuthClientInformationFull | None = None) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info = client_info

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """Plays the user: signs in on the consent page the SDK redirects to, hands back the callback."""

    def __init__(self, username: str) -> None:
        self.username = username
        self.visits: list[str] = []
        self._location = ""

    async def redirect(self, authorization_url: str) -> None:
        self.visits.append(authorization_url)
        self._location = await approve_async(authorization_url, self.username)

    async def callback(self) -> AuthorizationCodeResult:
        answer = {k: v[0] for k, v in parse_qs(urlsplit(self._location).query).items()}
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))
