"""Damage done to data files the way disks, copies and full file systems do it, for fault tests."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path


def page_size(path: Path) -> int:
    with path.open("rb") as handle:
        header = handle.read(100)
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def scramble_pages(path: Path, first: int, count: int = 4, seed: int = 7) -> None:
    """Overwrite `count` pages (1-based numbers, as SQLite counts them) with random bytes."""
    size = page_size(path)
    rng = random.Random(seed)
    with path.open("r+b") as handle:
        for number in range(first, first + count):
            handle.seek((number - 1) * size)
            handle.write(rng.randbytes(size))


def scramble_middle(path: Path, count: int = 4) -> None:
    """Scramble `count` pages from the middle of the file (never the header page)."""
    pages = path.stat().st_size // page_size(path)
    assert pages > count + 2, f"{path} is too small to damage in the middle"
    scramble_pages(path, max(2, pages // 2), count)


def truncate_to_zero(path: Path) -> None:
    path.write_bytes(b"")


def replace_header(path: Path) -> None:
    """The first 100 bytes (the SQLite header) replaced by random bytes."""
    with path.open("r+b") as handle:
        handle.write(random.Random(3).randbytes(100))


def checkpointed(path: Path) -> None:
    """Fold the WAL into the main file, so damage to the main file is what readers see."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
