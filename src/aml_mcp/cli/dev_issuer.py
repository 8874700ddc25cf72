"""`aml-mcp devauth rotate-keys` and `aml-mcp devauth client-secret`: the development issuer's keys."""

from __future__ import annotations

import argparse
from typing import Any

from aml_mcp.cli.options import data_options, settings_from
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.wiring import SERVICE_CLIENT_ID, service_client_secret


def _rotate(args: argparse.Namespace) -> int:
    keys = DevSigningKeys(settings_from(args).ensure_data_dir())
    print(f"new signing key {keys.rotate()}; JWKS now publishes {len(keys.jwks()['keys'])} keys")
    return 0


def _client_secret(args: argparse.Namespace) -> int:
    print(service_client_secret(settings_from(args).ensure_data_dir()))
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
