"""Make a directory tree read-only for the process under test, even when the tests run as root.

Mode bits do not stop root, so as root the tree is marked immutable (`chattr +i`), which stops
every writer; as any other user, write permission is removed. Both are undone on exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _tree(root: Path) -> list[Path]:
    return [root, *sorted(root.rglob("*"))] if root.is_dir() else [root]


@contextlib.contextmanager
def read_only_file(path: Path) -> Iterator[None]:
    """`read_only` for one file (its directory stays writable)."""
    with read_only(path):
        yield


@contextlib.contextmanager
def read_only(root: Path) -> Iterator[None]:
    """`root` and everything under it read-only until the context exits."""
    paths = _tree(root)
    if os.geteuid() != 0:
        modes = {p: stat.S_IMODE(p.stat().st_mode) for p in paths}
        for path in reversed(paths):
            path.chmod(modes[path] & ~0o222)
        try:
            yield
        finally:
            for path in paths:
                path.chmod(modes[path])
        return
    chattr = shutil.which("chattr")
    if chattr is None:
        pytest.skip("running as root without chattr: cannot make a directory read-only")
    marked: list[Path] = []
    try:
        for path in reversed(paths):
            done = subprocess.run([chattr, "+i", str(path)], capture_output=True, check=False)
            if done.returncode != 0:
                pytest.skip(f"this file system does not support immutable files: {done.stderr!r}")
            marked.append(path)
        yield
    finally:
        for path in marked:
            subprocess.run([chattr, "-i", str(path)], capture_output=True, check=False)
