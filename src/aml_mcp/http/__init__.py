"""The HTTP layer: what happens to a request before the protocol layer sees it."""
