"""The development issuer's signing keys as a file in the data directory, for one host.

Every process sharing the data directory (the server, `aml-mcp token`, `aml-mcp devauth
rotate-keys`) reads the same file, so they sign with the same key; the file's modification time is
the version by which a running server notices a rotation another process made.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from aml_mcp.shared_secrets.storage.files import write_private

KEY_FILE = Path("keys") / "devauth-signing.json"
"""Where the key document lives, relative to the data directory."""


class FilesKeyStorage:
    """The key document as an owner-only file (`DATA_DIR/keys/devauth-signing.json`)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def in_data_dir(cls, data_dir: Path) -> FilesKeyStorage:
        return cls(data_dir / KEY_FILE)

    def version(self) -> object | None:
        try:
            return self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def read(self) -> tuple[bytes, object]:
        version = self.path.stat().st_mtime_ns
        return self.path.read_bytes(), version

    def create(self, document: bytes) -> None:
        write_private(self.path, document, replace=False)

    def update(self, change: Callable[[bytes], bytes]) -> None:
        # One host: the last rotation wins (rotations are an operator's rare, manual step).
        write_private(self.path, change(self.path.read_bytes()), replace=True)


__all__ = ["KEY_FILE", "FilesKeyStorage"]
