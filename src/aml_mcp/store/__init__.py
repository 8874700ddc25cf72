"""Persistence: the database handle every durable component shares, and its migrations."""
