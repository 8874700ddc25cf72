"""What the bearer gate adds to a request: `BearerAdmission.admit` timed in-process with its real parts.

    .venv/bin/python benchmarks/auth_gate.py [--n 20000]

Three cases: a repeated token (the verified-token cache hit every client sees after its first
request), a fresh token each time (full RS256 signature check), and a refusal (no token). Each
includes the revocation check, the scope rule and both audit sinks (store row queued into the next
group commit; JSON line appended), exactly as on the request path.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from starlette.requests import Request

from aml_mcp.audit.wiring import build_audit
from aml_mcp.auth.scope_hierarchy import ScopeHierarchy
from aml_mcp.auth.wiring import LocalIssuer, build_auth
from aml_mcp.catalog import ToolRegistry
from aml_mcp.catalog.tools import ToolSpec
from aml_mcp.config import AuthSettings, Settings
from aml_mcp.devauth.wiring import build_dev_auth
from aml_mcp.persistence import LocalPersistence
from aml_mcp.principal import Principal
from aml_mcp.scope_rules import ScopeRules, StaticScopeRule


async def _body(arguments: object, ctx: object) -> dict[str, object]:
    return {}


def _request(token: str | None) -> Request:
    headers = [(b"content-type", b"application/json")]
    if token is not None:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    return Request(
        {"type": "http", "method": "POST", "path": "/mcp", "query_string": b"", "headers": headers}
    )


async def main(n: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="aml-mcp-auth-bench-"))
    settings = Settings(data_dir=data_dir, auth=AuthSettings())
    tools = ToolRegistry(
        [ToolSpec(name="t", description="d", input_schema={"type": "object"}, body=_body, scope="aml:read")]
    )  # type: ignore[arg-type]
    rules = ScopeRules({"tools/call": StaticScopeRule(tools.scope_needed)})
    persistence = LocalPersistence(data_dir)
    audit = build_audit(persistence.audit_table(), data_dir=data_dir, to_file=True, to_log=False)
    hierarchy = ScopeHierarchy({})
    state = persistence.devauth(replay_memory_seconds=settings.auth.dev.refresh_token_ttl_seconds)
    dev = build_dev_auth(
        settings.auth.dev,
        store=state.store,
        keys=state.keys,
        secrets=persistence.secrets(),
        resource_url=settings.resource_url,
        tenant_claim=settings.auth.tenant_claim,
        hierarchy=hierarchy,
    )
    auth = build_auth(
        settings.auth,
        resource_url=settings.resource_url,
        revocation_store=persistence.revocations(),
        audit=audit.log.record,
        scope_rules=rules,
        hierarchy=hierarchy,
        default_scopes=lambda: tools.scopes,
        local_issuers=[LocalIssuer(dev.issuer, dev.fetch_jwks)],
    )
    minter = dev.minter
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "t", "arguments": {}}}
    async with persistence.running(), audit.running(), dev.running(), auth.running():

        async def timed(label: str, tokens: list[str | None]) -> None:
            start = time.perf_counter()
            for token in tokens:
                verdict = await auth.admission.admit(_request(token), message)
                assert isinstance(verdict, Principal) == (token is not None)
            per = (time.perf_counter() - start) / len(tokens) * 1e6
            print(f"{label:<38} {per:8.1f} µs/request  ({len(tokens)} requests)")

        token = minter.mint(subject="alice", tenant="bank-a", client_id="c", scopes=["aml:read"]).token
        await timed("repeated token (verified-token cache)", [token] * n)
        fresh = [
            minter.mint(subject="alice", tenant="bank-a", client_id="c", scopes=["aml:read"]).token
            for _ in range(min(n, 2000))
        ]
        await timed("fresh token (RS256 verify)", list(fresh))
        await timed("no token (401 + audit)", [None] * n)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=20_000)
    asyncio.run(main(parser.parse_args().n))
