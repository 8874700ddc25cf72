"""Secrets as owner-only files in the data directory (the single-host default), and the atomic,
owner-only file write that other state kept in plain files (the server record, the development
issuer's signing keys) uses too."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from aml_mcp.shared_secrets.storage import checked_name


def write_private(path: Path, data: bytes, *, replace: bool) -> None:
    """Owner-only and atomic: a reader sees the old file or the new one, never half of either.

    With `replace=False` an existing file wins (another process created it first), so concurrent
    first starts agree on one secret.
    """
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)


def load_or_create_secret(path: Path, nbytes: int = 32) -> bytes:
    """The secret at `path`, created (owner-only, atomically) on first use.

    Shared by every process that uses the same data directory, so a sealed value minted by one
    replica opens in another.
    """
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        write_private(path, secrets.token_bytes(nbytes), replace=False)
        data = path.read_bytes()
    if len(data) < nbytes:
        raise ValueError(f"secret at {path} is shorter than {nbytes} bytes")
    return data


class FilesSecrets:
    """Secrets as owner-only files `<directory>/<name>.key` (the single-host default)."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    def secret(self, name: str, nbytes: int = 32) -> bytes:
        return load_or_create_secret(self._directory / f"{checked_name(name)}.key", nbytes)
