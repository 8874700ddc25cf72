"""The release version, read by the packaging metadata and by `server/discover` (one home)."""

__version__ = "0.1.0"
