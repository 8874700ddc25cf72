"""Server-side secrets every process of one deployment shares: the request-state sealing key, the
development issuer's service-client secret and consent-form key (never tokens: those are never
stored). `storage/` holds where they are kept: files in the data directory, or a table every
replica on one PostgreSQL database reads.
"""
