"""The bearer gate: the `Admission` the /mcp endpoint runs on every POST when authentication is on.

Order of checks, each refusal audited with its reason:

1. a token in the query string → 400 `invalid_request` (tokens never travel in URLs);
2. no `Authorization: Bearer` → 401 with `resource_metadata` (and the scope the call will need);
3. the token is verified (signature, issuer, audience, time window, required claims) → 401
   `invalid_token` on any failure, 503 if the issuer's keys cannot be had;
4. revocation by `jti` or subject → 401 `invalid_token`;
5. the scopes the request needs (from `ScopeRules`: the tool's scope for `tools/call`, the
   creating tool's for `tasks/*`), with the scope hierarchy applied → 403 `insufficient_scope`;
6. a token the lab's simulation minted (`SIMULATED_CLAIM`) passes only to look a task up → 401.

Only then is the principal handed to the protocol layer. The raw token goes no further than
step 3 and is never logged or stored.

The gate fails closed on what it did not foresee: a token that makes verification raise is a
malformed token (401), a verified identity that is not valid Unicode text, or that holds control,
bidi or invisible formatting characters (`unsafe_identity`: a name that would look like someone
else's), is refused (401), and a scope rule that raises refuses the request (a JSON-RPC error, never
a bare 500) — each audited. A database fault under a rule (its store unreachable right after a
connection reset) is the retryable 503 with `Retry-After` it is, not a 500; only a rule's bug is a
500. Whatever the token claims about itself is escaped before it reaches the audit trail.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import jwt
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from starlette.requests import Request
from starlette.responses import Response

from aml_mcp.audit import AuditEvent, AuditRecorder, Decision, task_reference
from aml_mcp.audit.decisions import admitted
from aml_mcp.audit.trace import trace_id_of
from aml_mcp.auth.challenge import Challenges
from aml_mcp.auth.claims import UnsafeIdentity, check_identity
from aml_mcp.auth.errors import TokenRejected, VerifierUnavailable
from aml_mcp.auth.revocation import RevocationList
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.verifier import Verifier
from aml_mcp.http.responses import jsonrpc_error, request_id_of, storage_unavailable_error
from aml_mcp.http.wellformed import escaped, has_lone_surrogate
from aml_mcp.principal import Principal
from aml_mcp.scope_rules import ScopeRules
from aml_mcp.store.faults import storage_fault

logger = logging.getLogger(__name__)

_TARGET_FIELDS = ("name", "uri")
_MAX_TARGET = 200
_UNVERIFIED_CLAIMS = ("iss", "sub", "client_id", "azp", "jti", "aud")
SIMULATED_TOKEN_METHODS = frozenset({"tasks/get"})
"""All a token the lab's simulation minted may get past the gate for: a task lookup, which for its
fresh subject can only answer "Task not found" (the refusal the simulation demonstrates)."""


def describe(message: Any) -> tuple[str | None, Mapping[str, Any], str | None]:
    """Method, params and target (tool name, resource URI or task id) of a decoded JSON-RPC body."""
    if not isinstance(message, dict):
        return None, {}, None
    method = message.get("method")
    method = method if isinstance(method, str) else None
    params = message.get("params")
    params = params if isinstance(params, dict) else {}
    target = next((params[f] for f in _TARGET_FIELDS if isinstance(params.get(f), str)), None)
    if target is None:
        target = task_reference(params.get("taskId"))
    return method, params, target[:_MAX_TARGET] if target else None


def _unverified_claims(token: str) -> dict[str, Any] | None:
    """For the audit record of a refused JWT: who it *claims* to be, clearly marked as unverified.

    Anyone can write anything into an unsigned payload, so every value is escaped to printable
    ASCII (a lone surrogate or a line separator is shown as its escape, never written raw).
    """
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except Exception:
        return None
    if not isinstance(claims, dict):
        return None
    picked: dict[str, Any] = {}
    for name in _UNVERIFIED_CLAIMS:
        value = claims.get(name)
        if isinstance(value, str):
            picked[name] = escaped(value, 128)
        elif isinstance(value, list):
            picked[name] = [escaped(str(item), 128) for item in value[:5]]
    return picked or None


def _not_text(principal: Principal) -> bool:
    """A verified identity field that is not valid Unicode text could be neither stored nor audited."""
    fields = (principal.issuer, principal.subject, principal.tenant, principal.client_id, principal.token_id)
    return any(value is not None and has_lone_surrogate(value) for value in fields) or any(
        has_lone_surrogate(scope) for scope in principal.scopes
    )


def _unsafe_identity(principal: Principal) -> UnsafeIdentity | None:
    """The claim rules refuse look-alike identities already; this holds the same rule for every
    field of whatever principal a verifier built, the issuer included (it comes from this server's
    own settings, and is shown beside the rest)."""
    fields = {
        "iss": principal.issuer,
        "sub": principal.subject,
        "tenant": principal.tenant,
        "client_id": principal.client_id,
        "jti": principal.token_id,
    }
    try:
        for name, value in fields.items():
            if value is not None:
                check_identity(name, value)
        for scope in principal.scopes:
            check_identity("scope", scope)
    except UnsafeIdentity as unsafe:
        return unsafe
    return None


def _refusal_detail(rejected: TokenRejected, token: str) -> dict[str, Any] | None:
    """What the audit record of a refused token shows: the claims it *says* it has (unverified,
    escaped), and for a look-alike identity the claim at fault with its value, escaped too."""
    detail: dict[str, Any] = {}
    unverified = _unverified_claims(token)
    if unverified:
        detail["unverified"] = unverified
    if isinstance(rejected, UnsafeIdentity):
        detail["claim"] = {"name": rejected.claim, "value": escaped(rejected.value, 128)}
    return detail or None


def _storage_refusal(error: Exception) -> MCPError | None:
    """The retryable storage error for a storage fault a scope rule let through, else `None`."""
    cause = storage_fault(error)
    return None if cause is None else MCPError(**storage_unavailable_error(cause))


def _token_in_query(request: Request) -> bool:
    """RFC 6750 §2.3 tokens in the URL are refused; the raw bytes are only parsed when they could hold one."""
    raw: bytes = request.scope.get("query_string", b"")
    if b"access_token" not in raw.lower() and b"%" not in raw:
        return False
    return any(key.lower() == "access_token" for key in request.query_params)


def _authorization_headers(request: Request) -> list[str]:
    """Every Authorization header, read straight from the ASGI scope (cheaper than building `Headers`)."""
    return [value.decode("latin-1") for name, value in request.scope["headers"] if name == b"authorization"]


class BearerAdmission:
    def __init__(
        self,
        *,
        verifier: Verifier,
        revocations: RevocationList,
        scope_rules: ScopeRules,
        hierarchy: ScopeHierarchy,
        challenges: Challenges,
        audit: AuditRecorder,
    ) -> None:
        self.verifier = verifier
        self.revocations = revocations
        self.scope_rules = scope_rules
        self.hierarchy = hierarchy
        self.challenges = challenges
        self.record = audit

    def _deny(
        self,
        response: Response,
        reason: str,
        method: str | None,
        target: str | None,
        principal: Principal | None = None,
        detail: Mapping[str, Any] | None = None,
    ) -> Response:
        self.record(
            AuditEvent.about(
                principal, decision=Decision.DENY, reason=reason, method=method, target=target, detail=detail
            )
        )
        return response

    async def admit(self, request: Request, message: Any) -> Principal | Response:
        method, params, target = describe(message)
        request_id = request_id_of(message)
        trace_id = trace_id_of(params)

        def deny(
            response: Response,
            reason: str,
            principal: Principal | None = None,
            detail: Mapping[str, Any] | None = None,
        ) -> Response:
            # The trace id joins a refusal to the client's trace as it does an admitted call.
            traced = {**(detail or {}), "trace_id": trace_id} if trace_id else detail
            return self._deny(response, reason, method, target, principal, traced)

        if _token_in_query(request):
            return deny(
                self.challenges.invalid_request(
                    request_id, "access tokens are not accepted in the query string"
                ),
                "token_in_query",
            )
        headers = _authorization_headers(request)
        if not headers:
            hint = self.scope_rules.hint(method, params) if method else frozenset()
            return deny(self.challenges.missing_token(request_id, hint), "no_token")
        if len(headers) > 1:
            return deny(
                self.challenges.invalid_request(request_id, "more than one Authorization header"),
                "duplicate_authorization",
            )
        scheme, _, token = headers[0].strip().partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            return deny(
                self.challenges.invalid_token(request_id, "the Authorization header is not a Bearer token"),
                "not_bearer",
            )
        try:
            principal = await self.verifier.verify(token)
        except VerifierUnavailable as unavailable:
            return deny(self.challenges.unavailable(request_id), unavailable.reason)
        except TokenRejected as rejected:
            return deny(
                self.challenges.invalid_token(request_id, rejected.description),
                rejected.reason,
                detail=_refusal_detail(rejected, token),
            )
        except Exception as error:
            if (cause := storage_fault(error)) is not None:  # a key store unreachable: not the token's fault
                logger.warning("token verification could not reach its store (%s)", cause)
                return deny(self.challenges.unavailable(request_id), "verifier_unavailable")
            # E.g. an `exp` of 400 digits overflows a float: the token is malformed, whoever signed it.
            # One line, no traceback: the client chose the input, and it must not flood the log.
            logger.warning("token verification raised %s; refused as malformed", type(error).__name__)
            unverified = _unverified_claims(token)
            return deny(
                self.challenges.invalid_token(request_id, "token is malformed"),
                "malformed_token",
                detail={"unverified": unverified} if unverified else None,
            )
        if _not_text(principal):
            return deny(
                self.challenges.invalid_token(request_id, "token claims are not valid Unicode text"),
                "malformed_token",
            )
        unsafe = _unsafe_identity(principal)
        if unsafe is not None:
            return deny(
                self.challenges.invalid_token(request_id, unsafe.description),
                unsafe.reason,
                detail=_refusal_detail(unsafe, token),
            )
        revoked = self.revocations.check(principal)
        if revoked is not None:
            return deny(
                self.challenges.invalid_token(request_id, "token has been revoked"),
                revoked,
                principal,
            )
        try:
            needed = await self.scope_rules.needed(method, params, principal) if method else frozenset()
        except Exception as error:
            # A rule that could not look its answer up (its store unavailable: the rule's own
            # retryable error, or a storage fault it let through) says why, in a JSON-RPC error the
            # client can act on (retryable, with a hint and `Retry-After`): 503, never let through.
            refused = error if isinstance(error, MCPError) else _storage_refusal(error)
            if refused is None:
                # The rules check their params' shape; what still raises here is a bug, and the
                # request is refused rather than let through unchecked.
                logger.exception("scope rule for %s raised; the request is refused", escaped(method or ""))
                return deny(
                    jsonrpc_error(500, INTERNAL_ERROR, "Internal error", request_id=request_id),
                    "scope_check_failed",
                    principal,
                )
            logger.warning(
                "scope rule for %s could not decide: %s", escaped(method or ""), refused.error.message
            )
            return deny(
                jsonrpc_error(
                    503,
                    refused.error.code,
                    refused.error.message,
                    request_id=request_id,
                    data=refused.error.data,
                ),
                "scope_check_unavailable",
                principal,
            )
        if self.hierarchy.missing(principal.scopes, needed):
            return deny(
                self.challenges.insufficient_scope(request_id, needed),
                "insufficient_scope",
                principal,
                detail={"needed": sorted(needed), "granted": sorted(principal.scopes)},
            )
        if principal.simulated and method not in SIMULATED_TOKEN_METHODS:
            return deny(
                self.challenges.invalid_token(request_id, "this token only demonstrates a refusal"),
                "simulated_token",
                principal,
            )
        # One record per request: a `tasks/*` handler's own decision takes this allow's place.
        admitted(
            self.record,
            AuditEvent.about(
                principal,
                decision=Decision.ALLOW,
                reason="ok",
                method=method,
                target=target,
                detail={"trace_id": trace_id} if trace_id else None,
            ),
        )
        return principal
