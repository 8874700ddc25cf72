"""What a started server tells the commands that share its data directory: where it answers and
whose tokens it trusts.

`aml-mcp token` mints for, and `aml-mcp revoke` writes the deny list of, the server that owns a
data directory. Guessing that server's address and issuers from the command's own flags goes
wrong quietly: a server started with `--port 9000` refuses a token minted for port 8000 as from an
untrusted issuer, and a revocation filed under an issuer the server does not compare against
denies nothing. So the server writes this record (owner-only, atomically) each time it starts,
and the commands read it; flags given on their command line still win.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

from aml_mcp.shared_secrets.storage.files import write_private

RECORD_FILE = "server.json"


@dataclass(frozen=True, slots=True)
class ServerRecord:
    resource_url: str
    """The canonical MCP endpoint URI: the audience the server's tokens must name."""
    trusted_issuers: tuple[str, ...]
    """Every `iss` it accepts, exactly as it compares them."""

    def write(self, data_dir: Path) -> None:
        document = {"resource_url": self.resource_url, "trusted_issuers": list(self.trusted_issuers)}
        write_private(data_dir / RECORD_FILE, json.dumps(document, indent=2).encode(), replace=True)

    @classmethod
    def read(cls, data_dir: Path) -> ServerRecord | None:
        """The record of the last server started on `data_dir`; None if none (or not readable as one)."""
        try:
            document = json.loads((data_dir / RECORD_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(document, dict):
            return None
        url, issuers = document.get("resource_url"), document.get("trusted_issuers")
        if not isinstance(url, str) or not _strings(issuers):
            return None
        return cls(url, tuple(issuers))


def _strings(value: object) -> TypeGuard[Sequence[str]]:
    return (
        isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)
    )
