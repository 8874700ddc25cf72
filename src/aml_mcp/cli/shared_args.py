"""How a printed command names the shared PostgreSQL database: `serve`'s banner and `cluster` print
`aml-mcp token ...` commands that must find the development issuer's key where the servers keep it.

With a database URL that key is in the database, in the servers' schema: a command given the URL
but not the schema reads (and creates) the tables of another schema and mints a token signed with
a key no server knows. So the command carries both. A URL holding a password is never printed: the
command then reads it from `AML_MCP_DATABASE_URL`.
"""

from __future__ import annotations

import shlex
from urllib.parse import parse_qs, urlsplit

DATABASE_URL_ENV = "AML_MCP_DATABASE_URL"
DATABASE_SCHEMA_ENV = "AML_MCP_DATABASE_SCHEMA"


def shared_state_args(database_url: str | None, schema: str | None) -> tuple[str, str]:
    """(environment prefix, options) for a printed command to use the servers' database and schema;
    empty strings when they use none."""
    if not database_url:
        return "", ""
    shown = f'"${DATABASE_URL_ENV}"' if _may_hold_password(database_url) else shlex.quote(database_url)
    env = f"{DATABASE_SCHEMA_ENV}={shlex.quote(schema)} " if schema is not None else ""
    return env, f" --database-url {shown}"


def _may_hold_password(url: str) -> bool:
    """Whether `url` names a password (in its user part or as a `password` parameter); a string
    this cannot read as a PostgreSQL URL (a key=value connection string) is taken to hold one."""
    try:
        parts = urlsplit(url)
        if parts.scheme not in ("postgresql", "postgres"):
            return True
        return bool(parts.password) or "password" in parse_qs(parts.query)
    except ValueError:
        return True
