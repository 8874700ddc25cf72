"""`aml-mcp audit tail`: the newest audit events, as JSON lines.

Printed as ASCII JSON: fields such as a tool name or an unverified claim are chosen by whoever sent
the request, so a raw C1 control (U+009B is a CSI on some terminals), a line separator (U+2028,
U+2029, U+0085) or a bidi override must never reach the terminal or a tool that splits lines.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import TYPE_CHECKING, Any

from aml_mcp.cli.options import data_options, settings_from

if TYPE_CHECKING:
    from aml_mcp.config import Settings


async def _tail(settings: Settings, limit: int) -> list[dict[str, Any]]:
    """From the trail the server writes (the persistence object's: the shared table on PostgreSQL,
    every replica's decisions, else the data directory's)."""
    from aml_mcp.persistence import open_persistence

    persistence = open_persistence(settings)
    trail = persistence.audit_reader()
    async with persistence.running():
        return await trail.recent_events(limit)


def _audit_tail(args: argparse.Namespace) -> int:
    from aml_mcp.audit.events import dumps

    for event in asyncio.run(_tail(settings_from(args), args.n)):
        print(dumps(event))
    return 0


def add_commands(commands: Any) -> None:
    audit = commands.add_parser("audit", help="the audit trail")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    tail = audit_commands.add_parser(
        "tail", parents=[data_options()], help="print the newest audit events as JSON lines"
    )
    tail.add_argument("-n", type=int, default=20, help="how many events (default 20)")
    tail.set_defaults(run=_audit_tail)
