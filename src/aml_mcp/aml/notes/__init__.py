"""Case notes: what a bank delivers, how both stores keep it, and what a search reads back.

Split along the store protocol: `model` (the note, tenants, the filter, the errors and the values
every layer speaks in), `vectors` (a bank's matrix in memory, built from stored rows), `cache`
(what a store keeps per bank until its next write), and `storage` (the protocols, with the SQLite
store in `storage.sqlite` and the PostgreSQL one in `storage.postgres`). Callers import the module
they need; this package re-exports nothing, so importing it loads neither a store nor numpy.
"""
