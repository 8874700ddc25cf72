"""Core benchmark: a trivial synchronous tools/call through the whole aml-mcp stack, against a bare
Starlette endpoint that parses the same JSON-RPC body and answers the same result (the ceiling
for Python ASGI on this machine), in the same run.

    .venv/bin/python benchmarks/core_http.py [--duration 5] [--connections 1 8]

A third server, the SDK's low-level tier alone with the same tool (no aml-mcp layers), shows
what this project adds on top of the SDK. All servers run under uvicorn in their own process
(pinned to one core where possible; the load generator takes the other). Prints throughput,
p50/p99 latency and server CPU per request for each, and the ratios.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import build_request, load_then_stop, pin_to, spawn_server, split_cores, summarize_ratio

PROTOCOL = "2026-07-28"
CALL = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "tools/call",
    "params": {
        "name": "test_simple_text",
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
    "Mcp-Name": "test_simple_text",
}


def bare_app():  # type: ignore[no-untyped-def]
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    async def endpoint(request: Request) -> Response:
        message = json.loads(await request.body())
        result = {
            "content": [{"type": "text", "text": "This is a simple text response for testing."}],
            "isError": False,
            "resultType": "complete",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "aml-mcp", "version": "0.1.0"}},
        }
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, separators=(",", ":"))
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])


def sdk_app():  # type: ignore[no-untyped-def]
    """The SDK alone: a low-level Server with the same one tool, in JSON mode, stateless."""
    import mcp_types as types
    from mcp.server.lowlevel.server import Server
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.applications import Starlette
    from starlette.routing import Route

    tool = types.Tool(name="test_simple_text", description="text", input_schema={"type": "object"})

    async def list_tools(ctx, params):  # type: ignore[no-untyped-def]
        return types.ListToolsResult(tools=[tool])

    async def call_tool(ctx, params):  # type: ignore[no-untyped-def]
        return types.CallToolResult(
            content=[types.TextContent(text="This is a simple text response for testing.")]
        )

    server = Server("sdk", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True)

    class Endpoint:  # an ASGI app object: Starlette passes (scope, receive, send) straight through
        async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
            await manager.handle_request(scope, receive, send)

    return Starlette(routes=[Route("/mcp", Endpoint())], lifespan=lambda app: manager.run())


def aml_app(data_dir: Path):  # type: ignore[no-untyped-def]
    from aml_mcp.app import build_app
    from aml_mcp.config import Settings
    from aml_mcp.conformance.fixtures import fixture_catalog

    # Authentication off: this measures the protocol stack; benchmarks/auth_http.py measures the gate.
    settings = Settings(data_dir=data_dir, log_level="warning", auth={"enabled": False})
    return build_app(settings, catalog=fixture_catalog())


def serve(kind: str, port: int, cpu: int) -> None:
    import uvicorn

    pin_to([cpu])
    if kind == "bare":
        app = bare_app()
    elif kind == "sdk":
        app = sdk_app()
    else:
        app = aml_app(Path(tempfile.mkdtemp(prefix="aml-bench-")))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start(kind: str, cpu: int) -> tuple[subprocess.Popen[bytes], int]:
    return spawn_server([sys.executable, __file__, "--serve", kind, "--cpu", str(cpu)], kind)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", choices=["bare", "sdk", "aml"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.cpu)
        return

    server_cpu, client_cpu = split_cores()
    body = json.dumps(CALL, separators=(",", ":")).encode()

    def ok(status: int, payload: bytes) -> bool:
        return status == 200 and b'"resultType":"complete"' in payload

    print(f"cores: server on {server_cpu}, load generator on {client_cpu}; {args.duration:.0f} s per run")
    for connections in args.connections:
        results = {}
        for kind in ("bare", "sdk", "aml"):
            proc, port = start(kind, server_cpu)
            request = build_request("127.0.0.1", port, "/mcp", body, HEADERS)
            results[kind] = load_then_stop(
                proc,
                port,
                lambda _, request=request: request,
                connections=connections,
                duration=args.duration,
                ok=ok,
            )
            print(results[kind].row(f"{kind} (c={connections})"))
        print(summarize_ratio(f"SDK alone vs bare (c={connections})", results["sdk"], results["bare"]))
        print(summarize_ratio(f"aml-mcp vs bare (c={connections})", results["aml"], results["bare"]))
        print(summarize_ratio(f"aml-mcp vs SDK alone (c={connections})", results["aml"], results["sdk"]))


if __name__ == "__main__":
    main()
