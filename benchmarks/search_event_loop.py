"""How much event-loop time a worst-case `search_aml_notes` call costs, and what that does to others.

The worst case (security review M2): a 1000-character query of one-letter words ("a b a b ...")
with `top_k=50`. Two measurements, each a ratio against a baseline run in the same script:

1. In process, on a bank of `--notes` demo notes: CPU time of the event-loop thread per call
   (`time.thread_time` around the awaited call, so the worker thread's share is not counted),
   for the rendering as it was (search in a worker thread, then the 50 hits rendered on the loop
   with the query's identifier candidates recomputed for every hit) against the current path
   (`AmlService.search_and_render`: search and rendering together in the worker thread, the
   candidates computed once per query).
2. Over HTTP, against `aml-mcp serve` (authentication off, loopback, `--notes` demo notes per bank):
   `/healthz` latency while `--clients` clients loop on the worst-case search, against `/healthz`
   latency on the same server when idle. Every request of every tenant, token checks included,
   waits behind whatever the event loop is doing, so this is the cross-tenant cost.

    .venv/bin/python benchmarks/search_event_loop.py [--notes 2000] [--clients 4] [--duration 10]

Figures (2026-12-01, shared 2-core machine, load average 3-5 from other test runs, 2000 notes
per bank):

    event-loop CPU per worst-case call:  as before 648-865 ms, now 0.47-0.52 ms (1250-1850x less)
    /healthz with 4 clients looping on the worst-case search: p50 5.6 ms, p99 18 ms, against
      2.6 ms / 9 ms idle on the same server (2.2x); the review measured a p50 of 326-1372 ms at
      b83838e. A worst-case call itself: p50 26 ms (306-682 ms at b83838e).
    What remains is the GIL shared with the worker threads, not work done on the loop.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import httpx
import mcp_types as types

from aml_mcp.aml.demo.corpus import TENANTS
from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.notes.model import normalise_identifier, normalise_name
from aml_mcp.aml.search.engine import SearchHit, SearchRequest
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.aml.tools.search_aml_notes import render_results
from aml_mcp.aml.wiring import build_aml
from aml_mcp.persistence import LocalPersistence

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import free_port

WORST_QUERY = ("a b " * 250)[:1000]
PROTOCOL = "2026-07-28"


# -- the rendering as it was (b83838e), kept here as the baseline ---------------------------------

_RUNS = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*[A-Za-z0-9]|[A-Za-z0-9]")


def _old_identifier_candidates(query: str) -> list[str]:
    tokens = _RUNS.findall(query)
    out: dict[str, None] = {}
    whole_id = normalise_identifier(query)
    if any(ch.isdigit() for ch in whole_id) and len(whole_id) >= 4:
        out[whole_id] = None
    for i in range(len(tokens)):
        for size in range(1, 9):
            if i + size > len(tokens):
                break
            norm = normalise_identifier("".join(tokens[i : i + size]))
            if any(ch.isdigit() for ch in norm) and len(norm) >= 4:
                out[norm] = None
    words = [t for t in tokens if not any(ch.isdigit() for ch in t)]
    whole_name = normalise_name(query)
    if whole_name:
        out[whole_name] = None
    for size in (4, 3, 2):
        for i in range(len(words) - size + 1):
            out[normalise_name(" ".join(words[i : i + size]))] = None
    return list(out)[:160]


def _old_render(hits: list[SearchHit], query: str) -> types.CallToolResult:
    results = []
    for hit in hits:
        candidates = set(_old_identifier_candidates(query))  # once per hit, as it was
        spoken = f" {normalise_name(query)} "
        matched = [
            s.name
            for s in hit.subjects
            if normalise_name(s.name) in candidates
            or f" {normalise_name(s.name)} " in spoken
            or (s.account_id is not None and normalise_identifier(s.account_id) in candidates)
        ]
        results.append({"note_id": hit.note_id, "snippet": hit.snippet, "matched_subjects": matched})
    return types.CallToolResult(
        content=[types.TextContent(text=str(len(results)))], structured_content={"results": results}
    )


# -- 1. event-loop CPU per call, in process -------------------------------------------------------


def loop_cpu_per_call(data_dir: Path, rounds: int) -> tuple[list[float], list[float]]:
    local = LocalPersistence(data_dir)
    notes = local.notes()
    aml = build_aml(
        AmlSettings(), notes=notes.notes, identifiers=notes.identifiers, baselines=local.baselines()
    )
    tenant = TENANTS[1].name
    request = SearchRequest(query=WORST_QUERY, top_k=50)
    before: list[float] = []
    now: list[float] = []

    async def run() -> None:
        async with aml.running():
            searcher = aml.service.searcher()
            view = aml.store.tenant(tenant)
            for _ in range(rounds):
                started = time.thread_time()
                hits = await anyio.to_thread.run_sync(searcher.search, view, request)
                _old_render(hits, request.query)
                before.append(time.thread_time() - started)

                started = time.thread_time()
                await aml.service.search_and_render(tenant, request, render_results)
                now.append(time.thread_time() - started)

    anyio.run(run)
    return before, now


# -- 2. /healthz latency over HTTP while worst-case searches run -----------------------------------


def _search_body() -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "search_aml_notes",
            "arguments": {"query": WORST_QUERY, "top_k": 50},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": PROTOCOL,
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }


SEARCH_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": "tools/call",
    "mcp-name": "search_aml_notes",
}


def healthz_latencies(url: str, duration: float, stop: threading.Event | None = None) -> list[float]:
    samples: list[float] = []
    with httpx.Client(base_url=url, timeout=30) as client:
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline and not (stop and stop.is_set()):
            started = time.perf_counter()
            client.get("/healthz").raise_for_status()
            samples.append(time.perf_counter() - started)
            time.sleep(0.02)
    return samples


def searching_client(url: str, stop: threading.Event, calls: list[float]) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            response = client.post("/mcp", json=_search_body(), headers=SEARCH_HEADERS)
            response.raise_for_status()
            assert "error" not in response.json(), response.text[:300]
            calls.append(time.perf_counter() - started)


def http_run(data_dir: Path, notes: int, clients: int, duration: float) -> dict[str, list[float]]:
    port = free_port()
    env = {
        **os.environ,
        "AML_MCP_AUTH__ENABLED": "false",
        "AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(notes),
        "AML_MCP_LOG_LEVEL": "warning",
    }
    exe = Path(sys.executable).with_name("aml-mcp")
    server = subprocess.Popen(
        [str(exe), "serve", "--data-dir", str(data_dir), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not become ready")
            time.sleep(0.2)
        idle = healthz_latencies(url, duration)
        stop = threading.Event()
        calls: list[float] = []
        workers = [threading.Thread(target=searching_client, args=(url, stop, calls)) for _ in range(clients)]
        for worker in workers:
            worker.start()
        time.sleep(1.0)  # let every client get going
        loaded = healthz_latencies(url, duration)
        stop.set()
        for worker in workers:
            worker.join()
        return {"idle": idle, "loaded": loaded, "calls": calls}
    finally:
        server.terminate()
        server.wait(30)


def ms(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notes", type=int, default=2000, help="demo notes per bank")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per /healthz phase")
    parser.add_argument("--rounds", type=int, default=10, help="in-process calls per variant")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aml-bench-loop-") as scratch:
        data_dir = Path(scratch) / "data"
        load_demo_if_empty(AmlSettings(demo_notes_per_tenant=args.notes), data_dir)

        before, now = loop_cpu_per_call(data_dir, args.rounds)
        b, n = statistics.median(before), statistics.median(now)
        print(f"event-loop CPU per worst-case call (median of {args.rounds}, {args.notes} notes per bank):")
        print(f"  as before (render on the loop, candidates per hit): {1000 * b:8.1f} ms")
        print(f"  now (search_and_render in the worker thread):       {1000 * n:8.2f} ms")
        print(f"  ratio before/now: {b / n if n else float('inf'):.0f}x")

        figures = http_run(data_dir, args.notes, args.clients, args.duration)
        idle, loaded, calls = figures["idle"], figures["loaded"], figures["calls"]
        print(f"/healthz over HTTP, idle vs {args.clients} clients looping on the worst-case search:")
        for label, samples in (("idle:  ", idle), ("loaded:", loaded)):
            print(
                f"  {label} p50 {ms(samples, 0.5):7.2f} ms  p99 {ms(samples, 0.99):7.2f} ms  "
                f"max {ms(samples, 1.0):7.2f} ms"
            )
        print(f"  ratio loaded/idle p50: {ms(loaded, 0.5) / ms(idle, 0.5):.1f}x")
        print(f"  worst-case searches: {len(calls)}, p50 {ms(calls, 0.5):.0f} ms per call")


if __name__ == "__main__":
    main()
