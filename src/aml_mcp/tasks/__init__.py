"""The Tasks extension (`io.modelcontextprotocol/tasks`): durable, owner-isolated tool tasks.

`model` holds the states and the record, `wire` the shapes clients see, `storage` the persistence
contract with its SQLite and PostgreSQL implementations, `transitions` the one way state changes,
`service` the lifecycle operations, `scheduler` the fair shares of run slots between tenants and
principals, `runner` the execution (leases, heartbeats, recovery),
`task_context` what a body sees while it runs as a task, `retention` the TTL sweeper, `streams`
what listen streams see, `handlers` the `tasks/*` protocol surface, and `wiring` the few lines
the composition root calls.
"""
