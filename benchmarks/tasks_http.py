"""Tasks benchmark: durable task creation and `tasks/get` over real HTTP on loopback.

    .venv/bin/python benchmarks/tasks_http.py [--duration 5] [--connections 1 16] [--no-fastmcp]

Servers, each under uvicorn in its own process pinned to one core (the load generator takes the
other), measured in the same run:

- `bare`: a Starlette endpoint that parses the same JSON-RPC body and answers the same result
  shape (a `CreateTaskResult` for `tools/call`, a completed task for `tasks/get`) from memory,
  storing nothing — the ceiling for Python ASGI on this machine;
- `aml`: aml-mcp with the conformance fixtures (authentication off, as in the others): every
  create is committed and fsync'd before it is answered (SQLite WAL, `synchronous=FULL`, group
  commit), and its completion is a second durable write;
- `fastmcp` (when its environment exists): FastMCP 4.1.4 + fastmcp-tasks 4.1.4 with its default
  in-memory backend — nothing durable. Its environment is separate from the project's:

      python3 -m venv benchmarks/.env-fastmcp
      benchmarks/.env-fastmcp/bin/pip install fastmcp==4.1.4 fastmcp-tasks==4.1.4

The task tool is the same everywhere: `slow_compute` with `seconds: 0`, i.e. a task that completes
at once. Prints throughput, p50/p99 latency and server CPU per request, then the ratios.
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from loadgen import (  # noqa: E402
    RunResult,
    build_request,
    load_then_stop,
    pin_to,
    spawn_server,
    split_cores,
    summarize_ratio,
)

PROTOCOL = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
FASTMCP_PYTHON = HERE / ".env-fastmcp" / "bin" / "python"
META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
}


def call_body(request_id: int) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": "slow_compute", "arguments": {"seconds": 0}, "_meta": META},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def get_body(request_id: int, task_id: str) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tasks/get",
        "params": {"taskId": task_id, "_meta": META},
    }
    return json.dumps(message, separators=(",", ":")).encode()


def headers(method: str, name: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": method,
        "Mcp-Name": name,
    }


# -- the servers -----------------------------------------------------------------------------------


def bare_app():  # type: ignore[no-untyped-def]
    """Same parsing, same answers, nothing stored: the ceiling."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    server_info = {"io.modelcontextprotocol/serverInfo": {"name": "aml-mcp", "version": "0.1.0"}}

    def task_fields(task_id: str, status: str) -> dict[str, object]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        return {
            "taskId": task_id,
            "status": status,
            "createdAt": now,
            "lastUpdatedAt": now,
            "ttlMs": 3_600_000,
            "pollIntervalMs": 1000,
        }

    async def endpoint(request: Request) -> Response:
        message = json.loads(await request.body())
        params = message["params"]
        if message["method"] == "tools/call":
            result = {
                "resultType": "task",
                **task_fields(secrets.token_urlsafe(24), "working"),
                "_meta": server_info,
            }
        else:
            result = {
                "resultType": "complete",
                **task_fields(params["taskId"], "completed"),
                "result": {"content": [{"type": "text", "text": "Computed for 0 s."}], "isError": False},
                "_meta": server_info,
            }
        body = json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}, separators=(",", ":"))
        return Response(body, media_type="application/json")

    return Starlette(routes=[Route("/mcp", endpoint, methods=["POST"])])


def aml_app(data_dir: Path):  # type: ignore[no-untyped-def]
    from aml_mcp.app import build_app
    from aml_mcp.config import AuthSettings, Settings
    from aml_mcp.conformance.fixtures import fixture_catalog
    from aml_mcp.tasks.settings import TaskSettings

    # One anonymous caller makes every task: the per-principal create window (finished tasks
    # count) would refuse most of a create run, and refusals are not what is measured.
    tasks = TaskSettings(max_created_per_principal_per_window=1_000_000_000)
    settings = Settings(data_dir=data_dir, log_level="warning", auth=AuthSettings(enabled=False), tasks=tasks)
    return build_app(settings, catalog=fixture_catalog())


def fastmcp_app():  # type: ignore[no-untyped-def]
    import anyio
    from fastmcp import FastMCP
    from fastmcp_tasks import TasksExtension

    mcp = FastMCP("bench")
    mcp.add_extension(TasksExtension())

    @mcp.tool(task=True)
    async def slow_compute(seconds: float, label: str | None = None) -> str:
        await anyio.sleep(seconds)
        return label or f"Computed for {seconds:g} s."

    return mcp.http_app(stateless_http=True, json_response=True)


def serve(kind: str, port: int, cpu: int) -> None:
    import logging

    import uvicorn

    pin_to([cpu])
    logging.disable(logging.INFO)  # audit lines and access logs are not what is measured
    if kind == "bare":
        app = bare_app()
    elif kind == "fastmcp":
        app = fastmcp_app()
    else:
        app = aml_app(Path(tempfile.mkdtemp(prefix="aml-tasks-bench-")))
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- driving them ----------------------------------------------------------------------------------


def start(kind: str, cpu: int) -> tuple[subprocess.Popen[bytes], int]:
    python = str(FASTMCP_PYTHON) if kind == "fastmcp" else sys.executable
    return spawn_server([python, __file__, "--serve", kind, "--cpu", str(cpu)], kind)


def one(port: int, body: bytes, method: str, name: str) -> dict[str, object]:
    """A single request (set-up: the task `tasks/get` will read)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            build_request("127.0.0.1", port, "/mcp", body, {**headers(method, name), "Connection": "close"})
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    payload = data.split(b"\r\n\r\n", 1)[1]
    result: dict[str, object] = json.loads(payload)["result"]
    return result


def completed_task(port: int) -> str:
    task_id = str(one(port, call_body(1), "tools/call", "slow_compute")["taskId"])
    for _ in range(500):
        if one(port, get_body(2, task_id), "tasks/get", task_id)["status"] == "completed":
            return task_id
        time.sleep(0.01)
    raise RuntimeError("the set-up task never completed")


def workload_requests(
    port: int, workload: str
) -> tuple[Callable[[int], bytes], Callable[[int, bytes], bool]]:
    """The request maker and the answer check for `create` (a task per request) or `get` (the same
    completed task read again) against the server on `port`."""
    if workload == "create":
        make: Callable[[int], bytes] = lambda n: build_request(  # noqa: E731
            "127.0.0.1", port, "/mcp", call_body(n), headers("tools/call", "slow_compute")
        )
        marker = b'"resultType":"task"'
    else:
        task_id = completed_task(port)
        fixed = build_request("127.0.0.1", port, "/mcp", get_body(7, task_id), headers("tasks/get", task_id))
        make = lambda n: fixed  # noqa: E731
        marker = b'"status":"completed"'

    def ok(status: int, body: bytes) -> bool:
        return status == 200 and marker in body.replace(b": ", b":")

    return make, ok


def measure(kind: str, workload: str, connections: int, duration: float, cpu: int) -> RunResult:
    proc, port = start(kind, cpu)
    make, ok = workload_requests(port, workload)
    return load_then_stop(proc, port, make, connections=connections, duration=duration, ok=ok)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", choices=["bare", "aml", "fastmcp"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=1)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--connections", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--workloads", nargs="+", default=["create", "get"], choices=["create", "get"])
    parser.add_argument(
        "--no-fastmcp", action="store_true", help="skip FastMCP even if its environment exists"
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.cpu)
        return

    server_cpu, client_cpu = split_cores()
    kinds = ["bare", "aml"]
    if FASTMCP_PYTHON.exists() and not args.no_fastmcp:
        kinds.append("fastmcp")
    else:
        print("(FastMCP skipped: no benchmarks/.env-fastmcp; see this script's docstring)")
    print(f"cores: server on {server_cpu}, load generator on {client_cpu}; {args.duration:.0f} s per run")
    for workload in args.workloads:
        for connections in args.connections:
            results = {
                kind: measure(kind, workload, connections, args.duration, server_cpu) for kind in kinds
            }
            for kind, result in results.items():
                print(result.row(f"{workload} {kind} (c={connections})"))
            print(
                summarize_ratio(
                    f"{workload}: aml-mcp vs bare (c={connections})", results["aml"], results["bare"]
                )
            )
            if "fastmcp" in results:
                print(
                    summarize_ratio(
                        f"{workload}: aml-mcp vs fastmcp-tasks (c={connections})",
                        results["aml"],
                        results["fastmcp"],
                    )
                )
            print()


if __name__ == "__main__":
    main()
