"""What starting the `aml-mcp` command costs, in CPU time, against importing httpx alone.

    .venv/bin/python benchmarks/cli_startup.py [--runs 9] [--aml-mcp .venv/bin/aml-mcp]

A command that only prints its help, or parses its arguments and then talks HTTP, should cost
about what its HTTP library costs to import: more means it imports work it will not do (the
server, the search stack). Each run measures one child process's user+system CPU time (from
`os.wait4`, so the parent's own work is not counted, and wall-clock noise from a busy machine is
not either). The commands and the baseline (`python -c "import httpx"`) are interleaved, run by
run, so a slow moment of the machine falls on all of them alike; the median of each is compared.

The acceptance line is `aml-mcp call --help` at most 3x the baseline.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

LIMIT = 3.0
"""`aml-mcp call --help` may cost at most this many times the baseline."""


def cpu_seconds(command: list[str]) -> float:
    """User+system CPU time of one run of `command` (its children included), output discarded."""
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9, help="runs of each command (default 9)")
    parser.add_argument(
        "--aml-mcp",
        default=str(Path(sys.executable).with_name("aml-mcp")),
        help="the aml-mcp program to measure (default: the one beside this Python)",
    )
    args = parser.parse_args()
    python = str(Path(args.aml_mcp).with_name("python"))
    commands = {
        'python -c "import httpx"': [python, "-c", "import httpx"],
        "aml-mcp --help": [args.aml_mcp, "--help"],
        "aml-mcp call --help": [args.aml_mcp, "call", "--help"],
        "aml-mcp token --help": [args.aml_mcp, "token", "--help"],
    }
    for command in commands.values():  # warm the file cache and the bytecode
        cpu_seconds(command)
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, command in commands.items():
            times[name].append(cpu_seconds(command))
    medians = {name: statistics.median(runs) for name, runs in times.items()}
    baseline_name = next(iter(commands))
    baseline = medians[baseline_name]
    print(f"CPU time (user+sys), median of {args.runs} interleaved runs; ratio to {baseline_name}")
    for name, median in medians.items():
        spread = f"{min(times[name]) * 1000:.0f}-{max(times[name]) * 1000:.0f}"
        print(f"  {name:28} {median * 1000:7.0f} ms  ({spread} ms)  {median / baseline:5.2f}x")
    ratio = medians["aml-mcp call --help"] / baseline
    verdict = "within" if ratio <= LIMIT else "OVER"
    print(f"aml-mcp call --help: {ratio:.2f}x the baseline, {verdict} the {LIMIT:.0f}x limit")
    return 0 if ratio <= LIMIT else 1


if __name__ == "__main__":
    raise SystemExit(main())
