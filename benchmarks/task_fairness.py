"""Task fairness between banks: how long one bank's one-case draft takes while another bank has
forty `run_full_eval` tasks queued, as a ratio to the same draft on an idle server.

    .venv/bin/python benchmarks/task_fairness.py [--notes 500] [--evals 40] [--drafts 5]

The real `aml-mcp serve` (demo corpus, development issuer, tokens minted with `aml-mcp token`)
runs in its own process, once per variant, each on a copy of one data directory:

- `fair`: the defaults — slots shared per tenant then per principal, identical runs coalesced;
- `fair, no coalescing`: the same, each of the forty evaluations runs;
- `no caps`: `max_concurrent_per_tenant` and `..._per_principal` as large as `max_concurrent` and
  no coalescing — one tenant may take every slot, as with the former single queue (a freed slot
  still goes to the tenant running the fewest).

For each: dave (harbour-trust, `aml:eval`) creates `--evals` evaluations (alternately saving a
baseline, so at most two distinct runs), then alice (meridian-bank, `aml:draft`) drafts one case
`--drafts` times in a row; the figure is the time from her create until her task leaves `working`
(completed, or asking for input), median and worst, and its ratio to the idle baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

PROTOCOL = "2026-07-28"
TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}
AML = [sys.executable, "-m", "aml_mcp"]


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def post(client: httpx.Client, token: str, method: str, params: dict[str, Any], name: str) -> dict[str, Any]:
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": method,
        "params": {
            **params,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": TASKS,
            },
        },
    }
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": PROTOCOL,
        "Mcp-Method": method,
        "Mcp-Name": name,
        "Authorization": f"Bearer {token}",
    }
    response = client.post("/mcp", content=json.dumps(body), headers=headers)
    answer: dict[str, Any] = response.json()
    if "result" not in answer:
        raise RuntimeError(f"{method}: {answer}")
    result: dict[str, Any] = answer["result"]
    return result


class Server:
    def __init__(self, data_dir: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [*AML, "serve", "--port", str(self.port), "--data-dir", str(data_dir)],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("server did not become ready")

    def token(self, subject: str, tenant: str, scope: str) -> str:
        args = ["token", "--data-dir", str(self.data_dir), "--port", str(self.port)]
        args += ["--subject", subject, "--tenant", tenant, "--scope", scope, "--ttl", "3600"]
        return subprocess.run([*AML, *args], check=True, capture_output=True, text=True).stdout.strip()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def draft_latencies(server: Server, drafts: int) -> list[float]:
    alice = server.token("alice", "meridian-bank", "aml:draft")
    seconds = []
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for _ in range(drafts):
            begun = time.monotonic()
            arguments = {"case_ids": ["MRD-C000001"]}
            call = {"name": "draft_sar_batch", "arguments": arguments}
            task_id = post(client, alice, "tools/call", call, "draft_sar_batch")["taskId"]
            while True:
                state = post(client, alice, "tasks/get", {"taskId": task_id}, task_id)
                if state["status"] != "working":
                    break
                time.sleep(0.02)
            seconds.append(time.monotonic() - begun)
            post(client, alice, "tasks/cancel", {"taskId": task_id}, task_id)
    return seconds


def flood(server: Server, evals: int) -> None:
    dave = server.token("dave", "harbour-trust", "aml:eval")
    with httpx.Client(base_url=server.url, timeout=120) as client:
        for i in range(evals):
            call = {"name": "run_full_eval", "arguments": {"save_as_baseline": i % 2 == 1}}
            post(client, dave, "tools/call", call, "run_full_eval")
    time.sleep(1.0)  # the evaluations are under way


def run(template: Path, env: dict[str, str], evals: int, drafts: int) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="aml-fair-") as scratch:
        data_dir = Path(scratch) / "data"
        shutil.copytree(template, data_dir)
        server = Server(data_dir, env)
        try:
            if evals:
                flood(server, evals)
            return draft_latencies(server, drafts)
        finally:
            server.stop()


def line(label: str, seconds: list[float], baseline: float | None) -> str:
    median = statistics.median(seconds)
    ratio = f"  x{median / baseline:6.1f} the idle median" if baseline else ""
    return f"{label:<28} median {1000 * median:8.1f} ms  worst {1000 * max(seconds):8.1f} ms{ratio}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--notes", type=int, default=500)
    parser.add_argument("--evals", type=int, default=40)
    parser.add_argument("--drafts", type=int, default=5)
    args = parser.parse_args()
    env = {"AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(args.notes), "AML_MCP_LOG_LEVEL": "warning"}
    with tempfile.TemporaryDirectory(prefix="aml-fair-template-") as scratch:
        template = Path(scratch) / "data"
        Server(template, env).stop()  # loads the demo corpus once
        idle = run(template, env, 0, args.drafts)
        baseline = statistics.median(idle)
        print(line("idle server", idle, None))
        variants = {
            "fair (defaults)": {},
            "fair, no coalescing": {"AML_MCP_TASKS__COALESCE_IDENTICAL_RUNS": "false"},
            "no caps, no coalescing": {
                "AML_MCP_TASKS__COALESCE_IDENTICAL_RUNS": "false",
                "AML_MCP_TASKS__MAX_CONCURRENT_PER_TENANT": "32",
                "AML_MCP_TASKS__MAX_CONCURRENT_PER_PRINCIPAL": "32",
            },
        }
        for label, extra in variants.items():
            seconds = run(template, {**env, **extra}, args.evals, args.drafts)
            print(line(f"{label}, {args.evals} evals", seconds, baseline))


if __name__ == "__main__":
    main()
