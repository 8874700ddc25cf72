"""aml-mcp: an MCP 2026-07-28 server for anti-money-laundering analysts."""

__version__ = "0.1.0"
