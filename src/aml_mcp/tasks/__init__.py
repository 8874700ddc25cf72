"""The Tasks extension (`io.modelcontextprotocol/tasks`): durable, owner-isolated tool tasks.

`model` holds the states and the record, `wire` the shapes clients see, `store` the persistence
contract, `service` the lifecycle operations, `runner` the execution (leases, heartbeats,
recovery), `retention` the TTL sweeper, `handlers` the `tasks/*` protocol surface and `wiring`
the few lines the composition root calls.
"""
