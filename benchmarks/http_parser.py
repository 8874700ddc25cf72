"""What bounding the HTTP edge costs: a trivial tools/call through the whole aml-mcp stack under
three HTTP/1.1 protocols, in the same run.

    .venv/bin/python benchmarks/http_parser.py [--duration 5] [--connections 1 8]

- `httptools`: uvicorn's default parser, no head limit, no request read deadline (the baseline);
- `bounded`: what `aml-mcp serve` runs (`http.protocol.uvicorn_options`): httptools plus the
  head-byte limit, the read deadline and the connection cap;
- `h11`: uvicorn's pure-Python parser, whose head limit is built in (the alternative).

Each server runs in its own process (pinned to one core where possible; the load generator takes
the other). Prints throughput, latency and server CPU per request, and each one's ratio to the
baseline: `bounded` should stay within noise of 1.0x, `h11` shows what the built-in limit would cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from core_http import CALL, HEADERS, aml_app
from loadgen import build_request, load_then_stop, pin_to, spawn_server, split_cores, summarize_ratio

KINDS = ("httptools", "bounded", "h11")


def serve(kind: str, port: int, cpu: int) -> None:
    import uvicorn

    from aml_mcp.http.protocol import uvicorn_options
    from aml_mcp.http.settings import HttpSettings

    pin_to([cpu])
    app = aml_app(Path(tempfile.mkdtemp(prefix="aml-bench-")))
    options = uvicorn_options(HttpSettings()) if kind == "bounded" else {"http": kind}
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False, **options)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--serve", choices=KINDS)
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
        for kind in KINDS:
            proc, port = spawn_server(
                [sys.executable, __file__, "--serve", kind, "--cpu", str(server_cpu)], kind
            )
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
        baseline = results["httptools"]
        for kind in KINDS[1:]:
            print(summarize_ratio(f"{kind} vs httptools (c={connections})", results[kind], baseline))


if __name__ == "__main__":
    main()
