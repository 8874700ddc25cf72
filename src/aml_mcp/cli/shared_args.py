"""How a printed command names the shared PostgreSQL database: `serve`'s banner and `cluster` print
`aml-mcp token ...` commands that must find the development issuer's key where the servers keep it.

With a database URL that key is in the database, in the servers' schema: a command given the URL
but not the schema reads (and creates) the tables of another schema and mints a token signed with
a key no server knows. So the command carries both. A URL holding a password is never printed: the
command then reads it from `AML_MCP_DATABASE_URL`.
"""

from __future__ import annotations

import shlex

DATABASE_URL_ENV = "AML_MCP_DATABASE_URL"
DATABASE_SCHEMA_ENV = "AML_MCP_DATABASE_SCHEMA"


def shared_state_args(database_url: str | None, schema: str | None) -> tuple[str, str]:
    """(environment prefix, options) for a printed command to use the servers' database and schema;
    empty strings when they use none."""
    if database_url is None:
        return "", ""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        has_password = bool(conninfo_to_dict(database_url).get("password"))
    except ProgrammingError:
        has_password = True
    shown = f'"${DATABASE_URL_ENV}"' if has_password else shlex.quote(database_url)
    env = f"{DATABASE_SCHEMA_ENV}={shlex.quote(schema)} " if schema is not None else ""
    return env, f" --database-url {shown}"
