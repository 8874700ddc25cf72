"""What authentication adds end to end: the same scoped tools/call with auth off and with auth on.

    .venv/bin/python benchmarks/auth_http.py [--duration 5] [--connections 1 8]

Each server runs under uvicorn in its own process pinned to one core (the load generator takes the
other), with the same catalog: one tool needing `aml:read`. With auth on, every request carries the
same RS256 token from the development issuer (the steady state of a client: the verified-token
cache hits), and every request is audited (store row + JSON line). Prints throughput, latency and
server CPU per request for both, and the difference in CPU per request.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import build_request, load_then_stop, pin_to, spawn_server, split_cores

PROTOCOL = "2026-07-28"
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "probe_read",
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {},
        },
    },
}
HEADERS = {
    "Content-Type": "application/json",
    "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": PROTOCOL,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "probe_read",
}


def catalog() -> Any:
    import mcp_types as types

    from aml_mcp.catalog import Catalog, ToolRegistry
    from aml_mcp.catalog.tools import ToolSpec

    async def body(arguments: Any, ctx: Any) -> types.CallToolResult:
        return types.CallToolResult(content=[types.TextContent(text=ctx.principal.tenant)])

    tool = ToolSpec(
        name="probe_read", description="d", input_schema={"type": "object"}, body=body, scope="aml:read"
    )
    return Catalog(tools=ToolRegistry([tool]))


def serve(kind: str, port: int, cpu: int, data_dir: Path) -> None:
    import uvicorn

    from aml_mcp.app import build_app
    from aml_mcp.config import AuthSettings, Settings

    pin_to([cpu])
    auth = AuthSettings(enabled=kind == "auth")
    settings = Settings(port=port, data_dir=data_dir, log_level="warning", auth=auth)
    uvicorn.run(
        build_app(settings, catalog=catalog()),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


def start(kind: str, cpu: int, data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    args = [sys.executable, __file__, "--serve", kind, "--cpu", str(cpu), "--data-dir", str(data_dir)]
    return spawn_server(args, kind)


def token_for(data_dir: Path, port: int) -> str:
    from aml_mcp.devauth.keys import DevSigningKeys
    from aml_mcp.devauth.wiring import token_minter

    minter = token_minter(
        DevSigningKeys.in_data_dir(data_dir),
        resource_url=f"http://127.0.0.1:{port}/mcp",
        path="/oauth",
        tenant_claim="tenant",
    )
    return minter.mint(
        subject="bench", tenant="bank-a", client_id="bench", scopes=["aml:read"], ttl_seconds=3600
    ).token


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", choices=["open", "auth"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--data-dir", type=Path)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.cpu, args.data_dir)
        return

    server_cpu, client_cpu = split_cores()
    body = json.dumps(CALL, separators=(",", ":")).encode()

    def ok(status: int, payload: bytes) -> bool:
        return status == 200 and b'"resultType":"complete"' in payload

    print(f"cores: server on {server_cpu}, load generator on {client_cpu}; {args.duration:.0f} s per run")
    for connections in args.connections:
        results = {}
        for kind in ("open", "auth"):
            data_dir = Path(tempfile.mkdtemp(prefix="aml-auth-bench-"))
            proc, port = start(kind, server_cpu, data_dir)
            headers = dict(HEADERS)
            if kind == "auth":
                headers["Authorization"] = f"Bearer {token_for(data_dir, port)}"
            request = build_request("127.0.0.1", port, "/mcp", body, headers)
            results[kind] = load_then_stop(
                proc,
                port,
                lambda _, request=request: request,
                connections=connections,
                duration=args.duration,
                ok=ok,
            )
            print(results[kind].row(f"auth {kind} (c={connections})"))
        added = results["auth"].cpu_per_request_ms - results["open"].cpu_per_request_ms
        print(f"authentication adds {1000 * added:.0f} µs of server CPU per request (c={connections})")


if __name__ == "__main__":
    main()
