"""The conformance fixture catalog: what the official MCP conformance suite expects a server to expose.

Served by `aml-mcp conformance-server` through the same composition root as the real server,
with authentication off and bound to loopback.
"""
