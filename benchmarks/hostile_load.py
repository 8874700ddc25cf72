"""What hostile clients cost a normal one: p50/p99 of a normal client's calls alone and under attack.

A real `aml-mcp serve` (loopback, `--notes` demo notes per bank, the development issuer's tokens)
is measured from a normal client — an analyst of one bank — that alternates an ordinary
`search_aml_notes` call and a `/healthz` probe, first alone, then while each of these runs (the
attackers hold valid tokens of another bank, so every hostile request gets as far as it can):

(a) `--searchers` clients looping on the worst-case search (a 1,000-character query of one-letter
    words with `top_k=50`, security review M2);
(b) one client sending `tools/list` requests with 20,000 header fields, back to back (M1);
(c) `--tricklers` slow clients that open connections and send a request head one byte at a time,
    never finishing (M3), reconnecting whenever the server cuts them off.

Each phase is reported as p50/p99 and as the ratio hostile/alone of the same server in the same
run (these machines are shared and noisy, so only ratios compare). The target is <= 3x.

    .venv/bin/python benchmarks/hostile_load.py [--notes 2000] [--duration 10]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from aml_mcp.aml.demo.first_start import load_demo_if_empty
from aml_mcp.aml.settings import AmlSettings
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.wiring import token_minter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from loadgen import free_port
from search_event_loop import SEARCH_HEADERS, _search_body, ms

PROTOCOL = "2026-07-28"


def _call(name: str, arguments: dict[str, Any] | None, method: str = "tools/call") -> dict[str, Any]:
    params: dict[str, Any] = {
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    }
    if method == "tools/call":
        params.update(name=name, arguments=arguments or {})
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


NORMAL_SEARCH = _call("search_aml_notes", {"query": "cash deposits just under the reporting threshold"})
LIST_HEADERS = {**SEARCH_HEADERS, "mcp-method": "tools/list"}
del LIST_HEADERS["mcp-name"]


def _client(url: str, token: str, timeout: float = 60) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=timeout, headers={"authorization": f"Bearer {token}"})


def normal_client(url: str, token: str, duration: float) -> dict[str, list[float]]:
    """Alternate an ordinary search and a /healthz probe for `duration` seconds; latencies of each."""
    search: list[float] = []
    health: list[float] = []
    with _client(url, token) as client:
        deadline = time.monotonic() + duration
        while time.monotonic() < deadline:
            started = time.perf_counter()
            response = client.post("/mcp", json=NORMAL_SEARCH, headers=SEARCH_HEADERS)
            assert response.status_code == 200 and "error" not in response.json(), response.text[:200]
            search.append(time.perf_counter() - started)
            started = time.perf_counter()
            client.get("/healthz").raise_for_status()
            health.append(time.perf_counter() - started)
            time.sleep(0.02)
    return {"search": search, "healthz": health}


def worst_searcher(url: str, token: str, stop: threading.Event) -> None:
    with _client(url, token) as client:
        while not stop.is_set():
            client.post("/mcp", json=_search_body(), headers=SEARCH_HEADERS)


def header_flooder(url: str, token: str, stop: threading.Event) -> None:
    headers = {**LIST_HEADERS, **{f"x-h{n}": "v" for n in range(20_000)}}
    body = _call("", None, "tools/list")
    with _client(url, token) as client:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):  # refused and closed: go again
                client.post("/mcp", json=body, headers=headers)


def trickler(port: int, stop: threading.Event) -> None:
    head = f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: ".encode() + b"a" * 1_000_000
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                for byte in head:
                    if stop.is_set():
                        return
                    sock.sendall(bytes([byte]))
                    time.sleep(0.05)
        except OSError:
            time.sleep(0.05)  # cut off by the server: reconnect


def _attack(attack: Callable[[threading.Event], None], count: int, stop: Any) -> None:
    """One attacking process: `count` threads of `attack` until `stop` (a process event) is set."""
    local = threading.Event()
    threads = [threading.Thread(target=attack, args=(local,), daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    stop.wait()
    local.set()
    for thread in threads:
        thread.join(timeout=30)


def under(
    attack: Callable[[threading.Event], None], count: int, url: str, token: str, duration: float
) -> dict[str, list[float]]:
    """The normal client's latencies while `attack` runs in `count` threads of another process (so
    the attackers' own CPU work never holds this process's interpreter lock)."""
    stop = multiprocessing.get_context("fork").Event()
    process = multiprocessing.get_context("fork").Process(target=_attack, args=(attack, count, stop))
    process.start()
    time.sleep(1.0)  # let the attack get going
    try:
        return normal_client(url, token, duration)
    finally:
        stop.set()
        process.join(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--notes", type=int, default=2000, help="demo notes per bank")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--searchers", type=int, default=4)
    parser.add_argument("--tricklers", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="aml-bench-hostile-") as scratch:
        data_dir = Path(scratch) / "data"
        load_demo_if_empty(AmlSettings(demo_notes_per_tenant=args.notes), data_dir)
        port = free_port()
        env = {
            **os.environ,
            "AML_MCP_AML__DEMO_NOTES_PER_TENANT": str(args.notes),
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
            minter = token_minter(
                DevSigningKeys.in_data_dir(data_dir),
                resource_url=f"{url}/mcp",
                path="/oauth",
                tenant_claim="tenant",
            )
            mint = minter.mint
            analyst = mint(subject="alice", tenant="meridian-bank", client_id="b", scopes=["aml:read"]).token
            attacker = mint(subject="bob", tenant="harbour-trust", client_id="b", scopes=["aml:read"]).token
            alone = normal_client(url, analyst, args.duration)
            phases = {
                f"(a) {args.searchers} worst-case searchers": under(
                    lambda stop: worst_searcher(url, attacker, stop),
                    args.searchers,
                    url,
                    analyst,
                    args.duration,
                ),
                "(b) one 20,000-header sender": under(
                    lambda stop: header_flooder(url, attacker, stop), 1, url, analyst, args.duration
                ),
                f"(c) {args.tricklers} header tricklers": under(
                    lambda stop: trickler(port, stop), args.tricklers, url, analyst, args.duration
                ),
            }
        finally:
            server.terminate()
            server.wait(30)

    print(f"normal client, {args.notes} notes per bank, {args.duration:.0f} s per phase (p50 / p99, ms):")
    for what in ("search", "healthz"):
        base = alone[what]
        print(f"  {what:<8} alone: {ms(base, 0.5):7.1f} / {ms(base, 0.99):7.1f}  ({len(base)} calls)")
        for label, figures in phases.items():
            got = figures[what]
            ratio50 = ms(got, 0.5) / ms(base, 0.5)
            ratio99 = ms(got, 0.99) / ms(base, 0.99)
            print(
                f"  {what:<8} {label:<32} {ms(got, 0.5):7.1f} / {ms(got, 0.99):7.1f}"
                f"   ratio {ratio50:4.1f}x / {ratio99:4.1f}x"
            )


if __name__ == "__main__":
    main()
