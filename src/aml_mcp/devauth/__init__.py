"""A development authorization server: real OAuth 2.1 flows for local use and tests, never for production.

Built on authlib. It issues RFC 9068 JWT access tokens whose `aud` is the RFC 8707 `resource` the
client asked for, signs them with RS256 keys kept in the data directory, and knows a few demo
users in two tenants. It is mounted in the same app as the MCP endpoint (under `/oauth`) so one
`aml-mcp serve` is self-contained; production deployments switch it off and trust a real issuer.
"""
