"""`aml-mcp devauth rotate-keys` and `aml-mcp devauth client-secret`: the development issuer's keys.

Both act on the data directory's keys, or with `--database-url` on those every replica of that
database shares (a rotation there is noticed by every running replica on its next signature).
"""

from __future__ import annotations

import argparse
from typing import Any

from aml_mcp.cli.options import data_options, settings_from, shared_database
from aml_mcp.devauth.wiring import SERVICE_CLIENT_ID, service_client_secret, signing_keys


def _rotate(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    with signing_keys(settings.ensure_data_dir(), shared_database(settings)) as keys:
        print(f"new signing key {keys.rotate()}; JWKS now publishes {len(keys.jwks()['keys'])} keys")
    return 0


def _client_secret(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    print(service_client_secret(settings.ensure_data_dir(), shared_database(settings)))
    return 0


def add_commands(commands: Any) -> None:
    devauth = commands.add_parser("devauth", help="the development authorization server")
    devauth_commands = devauth.add_subparsers(dest="devauth_command", required=True)
    rotate = devauth_commands.add_parser(
        "rotate-keys", parents=[data_options()], help="new signing key; the old ones stay published"
    )
    rotate.set_defaults(run=_rotate)
    secret = devauth_commands.add_parser(
        "client-secret",
        parents=[data_options()],
        help=f"print the secret of the pre-registered {SERVICE_CLIENT_ID} client",
    )
    secret.set_defaults(run=_client_secret)
