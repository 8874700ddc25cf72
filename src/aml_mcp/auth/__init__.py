"""The OAuth 2.1 resource server: token verification, the bearer gate, RFC 9728 metadata, revocation.

`wiring.build_auth` assembles it for the composition root; `gate.BearerAdmission` is what runs on
every request (docs/security.md walks through the checks in order). It knows no scope names of
its own and no particular issuer: both are handed in.
"""
