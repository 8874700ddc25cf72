"""The OAuth 2.1 resource server: token verification, the bearer gate, RFC 9728 metadata, revocation.

`wiring.build_auth` assembles it for the composition root; `gate.BearerAdmission` is what runs on
every request. See DESIGN.md ("bearer verification → scope gate") and README's Authentication section.
"""
