"""Why a credential was refused: one exception carrying a stable reason for the audit trail."""

from __future__ import annotations


class TokenRejected(Exception):
    """A presented access token is not acceptable. Always answered with 401 `invalid_token`.

    `reason` is short and stable (it is what audit records and tests match on); `description`
    is the human-readable `error_description` sent to the client — it names the failed check but
    never echoes token contents.
    """

    def __init__(self, reason: str, description: str) -> None:
        super().__init__(description)
        self.reason = reason
        self.description = description


class VerifierUnavailable(TokenRejected):
    """The keys or the introspection endpoint could not be reached: still a refusal (fail closed)."""

    def __init__(self, description: str) -> None:
        super().__init__("verifier_unavailable", description)
