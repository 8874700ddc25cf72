"""`aml-mcp devauth rotate-keys` and `aml-mcp devauth client-secret`: the development issuer's keys.

Both act on the data directory's keys, or with `--database-url` on those every replica of that
database shares (a rotation there is noticed by every running replica on its next signature).
"""

from __future__ import annotations

import argparse
from typing import Any

from aml_mcp.cli.options import data_options, settings_from

SERVICE_CLIENT_ID = "aml-mcp-service"
"""`aml_mcp.devauth.wiring.SERVICE_CLIENT_ID`, for the help text only (a test keeps them equal):
the development issuer is imported when a command runs, not when its arguments are parsed."""


def _rotate(args: argparse.Namespace) -> int:
    from aml_mcp.persistence import open_persistence

    with open_persistence(settings_from(args)).signing_keys() as keys:
        print(f"new signing key {keys.rotate()}; JWKS now publishes {len(keys.jwks()['keys'])} keys")
    return 0


def _client_secret(args: argparse.Namespace) -> int:
    from aml_mcp.devauth.wiring import service_client_secret
    from aml_mcp.persistence import open_persistence

    print(service_client_secret(open_persistence(settings_from(args)).secrets()))
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
