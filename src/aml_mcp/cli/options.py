"""Options several `aml-mcp` commands share, and the settings they add up to.

The options are argparse alone; the settings and the stores are imported by the functions that
read them, which only a running command calls (building the command line must not import the
server).
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from aml_mcp.config import Settings


def data_options() -> argparse.ArgumentParser:
    """`--data-dir`, `--config` and `--database-url`: which server's data a command works on (a
    parent parser). With a database URL, the state replicas share is read and written there."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--data-dir", type=Path, help="the server's data directory (default ./var)")
    parser.add_argument("--config", type=Path, help="a TOML settings file")
    parser.add_argument(
        "--database-url",
        help="the shared PostgreSQL database of a scaled-out deployment (default: AML_MCP_DATABASE_URL,"
        " else SQLite in the data directory)",
    )
    return parser


def address_options() -> argparse.ArgumentParser:
    """`--host`, `--port` and `--public-url` of the server a command speaks for (its issuer and
    audience)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", help="the server's host, for the issuer and audience (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="the server's port, for the issuer and audience")
    parser.add_argument(
        "--public-url", help="the MCP endpoint URL clients use (a load balancer's): the audience"
    )
    return parser


def settings_from(args: argparse.Namespace) -> Settings:
    """Defaults < `--config` < environment < the flags given on this command line."""
    from aml_mcp.config import load_settings

    return load_settings(
        getattr(args, "config", None),
        data_dir=getattr(args, "data_dir", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
        database_url=getattr(args, "database_url", None),
        public_url=getattr(args, "public_url", None),
    )


def served_url(settings: Settings, args: argparse.Namespace) -> str:
    """The resource URL of the server whose data directory this is: `--host`/`--port` when given,
    else what that server recorded when it last started, else what the settings say."""
    from aml_mcp.server_record import ServerRecord

    given = (getattr(args, name, None) for name in ("host", "port", "public_url"))
    if all(value is None for value in given):
        record = ServerRecord.read(settings.data_dir)
        if record is not None:
            return record.resource_url
    return settings.resource_url


def trusted_issuers(settings: Settings) -> list[str]:
    """The `iss` values whose tokens the server on this data directory accepts, exactly as it
    compares them: those it recorded when it last started, and those these settings name (the
    development issuer when on, the configured issuers, the introspection issuer).
    """
    from aml_mcp.devauth.wiring import dev_issuer
    from aml_mcp.server_record import ServerRecord

    auth = settings.auth
    record = ServerRecord.read(settings.data_dir)
    recorded = list(record.trusted_issuers) if record is not None else []
    if not auth.enabled:
        return recorded
    trusted = [dev_issuer(settings.resource_url, auth.dev.path)] if auth.dev.enabled else []
    trusted += recorded
    trusted += [issuer.issuer for issuer in auth.issuers]
    if auth.introspection is not None:
        trusted.append(auth.introspection.issuer)
    return list(dict.fromkeys(trusted))


# -- printed commands: how they name the shared PostgreSQL database -----------------------------------
#
# `serve`'s banner and `cluster` print `aml-mcp token ...` commands that must find the development
# issuer's key where the servers keep it. With a database URL that key is in the database, in the
# servers' schema: a command given the URL but not the schema reads (and creates) the tables of
# another schema and mints a token signed with a key no server knows, so the command carries both.
# A URL holding a password is never printed: the command then reads it from `AML_MCP_DATABASE_URL`.

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
