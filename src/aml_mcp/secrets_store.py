"""Server-side secrets kept in the data directory (never tokens: those are never stored)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def load_or_create_secret(path: Path, nbytes: int = 32) -> bytes:
    """The secret at `path`, created (owner-only, atomically) on first use.

    Shared by every process that uses the same data directory, so a sealed value minted by one
    replica opens in another.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = secrets.token_bytes(nbytes)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, fresh)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process won the race; then read theirs
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
        data = path.read_bytes()
    if len(data) < nbytes:
        raise ValueError(f"secret at {path} is shorter than {nbytes} bytes")
    return data
