"""The lab: a web page at `/lab` on which people who evaluate the server watch it work.

The page is an MCP client like any other — it signs in through the authorization server, calls
`/mcp` with its bearer token and follows its tasks over `subscriptions/listen` — so what it shows
is what any client gets. What the server adds for it is small: the static assets, a read-only
view of the caller's bank's audit trail, and (with the development authorization server only)
deliberately flawed copies of the caller's own token for the authorization simulation.
"""
