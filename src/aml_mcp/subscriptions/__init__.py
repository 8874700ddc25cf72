"""`subscriptions/listen`: the event bus and the stream handler."""
