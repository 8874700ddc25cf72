"""Settings for tests that exercise everything but authentication (loopback, auth off)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aml_mcp.config import Settings


def open_settings(data_dir: Path, **overrides: Any) -> Settings:
    return Settings(data_dir=data_dir, auth={"enabled": False}, **overrides)
