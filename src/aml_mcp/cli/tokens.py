"""`aml-mcp token` and `aml-mcp revoke`: a development token for scripts, and the revocation list.

`revoke` compares `--issuer` exactly with the issuers the server trusts (as the server compares a
token's `iss`): a revocation recorded under a near miss (a trailing slash, `localhost` for
`127.0.0.1`, another port) would deny nothing while the command reported success. So it refuses
an untrusted issuer unless `--force` says the issuer is about to be trusted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any

from aml_mcp.cli.options import address_options, data_options, served_url, settings_from, trusted_issuers
from aml_mcp.cli.startup import EXIT_SETTINGS

if TYPE_CHECKING:
    from aml_mcp.auth.revocation import RevocationList
    from aml_mcp.config import Settings


def _token(args: argparse.Namespace) -> int:
    from aml_mcp.devauth.wiring import CLI_CLIENT_ID, token_minter
    from aml_mcp.persistence import open_persistence

    settings = settings_from(args)
    # With a database URL, the key every replica on that database signs with and trusts.
    with open_persistence(settings).signing_keys() as keys:
        minter = token_minter(
            keys,
            resource_url=served_url(settings, args),
            path=settings.auth.dev.path,
            tenant_claim=settings.auth.tenant_claim,
        )
        minted = minter.mint(
            subject=args.subject,
            tenant=args.tenant,
            client_id=CLI_CLIENT_ID if args.client is None else args.client,
            scopes=args.scope.split(),
            audience=args.audience,
            ttl_seconds=args.ttl,
        )
    print(minted.token)
    if args.verbose:
        print(json.dumps(minted.claims, indent=2), file=sys.stderr)
    return 0


async def _with_revocations(settings: Settings, args: argparse.Namespace) -> int:
    """The revocation list the server reads: the shared one on PostgreSQL (every replica enforces
    a change at once, by NOTIFY), else the data directory's."""
    from aml_mcp.auth.revocation import RevocationList
    from aml_mcp.persistence import open_persistence

    persistence = open_persistence(settings)
    store = persistence.revocations()
    async with persistence.running():
        return await _change_revocations(RevocationList(store), args)


async def _change_revocations(revocations: RevocationList, args: argparse.Namespace) -> int:
    if args.list:
        for entry in await revocations.entries():
            print(json.dumps(_entry(entry)))
        return 0
    if args.jti:
        if args.lift:
            return 0 if await revocations.lift("jti", args.issuer, args.jti) else 1
        await revocations.revoke_token(args.jti, issuer=args.issuer, note=args.note)
        print(f"revoked token {args.jti}" + (f" of {args.issuer}" if args.issuer else " (any issuer)"))
        return 0
    if not args.issuer:
        print("aml-mcp revoke: --subject needs --issuer", file=sys.stderr)
        return 2
    if args.lift:
        return 0 if await revocations.lift("subject", args.issuer, args.subject) else 1
    await revocations.revoke_subject(args.issuer, args.subject, note=args.note)
    print(f"revoked every token of {args.subject} from {args.issuer}")
    return 0


def _entry(entry: Any) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in ("kind", "issuer", "value", "revoked_at", "note")}


def _revoke(args: argparse.Namespace) -> int:
    if not (args.list or args.jti or args.subject):
        print("aml-mcp revoke: give --jti, --subject (with --issuer) or --list", file=sys.stderr)
        return EXIT_SETTINGS
    settings = settings_from(args)
    adding = not (args.list or args.lift)
    if adding and args.issuer is not None and not args.force:
        refusal = _untrusted(args.issuer, trusted_issuers(settings))
        if refusal is not None:
            print(f"aml-mcp revoke: {refusal}", file=sys.stderr)
            return EXIT_SETTINGS
    return asyncio.run(_with_revocations(settings, args))


def _untrusted(issuer: str, trusted: list[str]) -> str | None:
    """Why a revocation for `issuer` would deny nothing on this server (None: it is trusted)."""
    if issuer in trusted:
        return None
    known = ", ".join(trusted) if trusted else "none (authentication is off)"
    return (
        f"refusing: {issuer!r} is not an issuer this server trusts, so the revocation would deny "
        f"nothing (trusted, compared exactly: {known}; give --port/--host/--config as for serve, "
        "or --force to record it for an issuer about to be trusted)"
    )


def add_commands(commands: Any) -> None:
    token = commands.add_parser(
        "token",
        parents=[data_options(), address_options()],
        help="print an access token signed by the development issuer's key",
    )
    token.add_argument("--subject", required=True)
    token.add_argument("--tenant", required=True)
    token.add_argument("--client", help="the token's client_id (default: the pre-registered CLI client)")
    token.add_argument("--scope", default="aml:read", help='space-separated, e.g. "aml:read aml:draft"')
    token.add_argument("--audience", help="the token's aud (default: this server's resource URL)")
    token.add_argument("--ttl", type=int, default=900, help="lifetime in seconds (default 900)")
    token.add_argument("-v", "--verbose", action="store_true", help="also print the claims on stderr")
    token.set_defaults(run=_token)

    revoke = commands.add_parser(
        "revoke",
        parents=[data_options(), address_options()],
        help="deny a token (--jti) or every token of a subject",
    )
    revoke.add_argument("--jti", help="the token id to deny")
    revoke.add_argument("--subject", help="the subject to deny (needs --issuer)")
    revoke.add_argument("--issuer", help="the issuer of the subject (or of the jti; default any issuer)")
    revoke.add_argument("--note", help="why (kept with the revocation)")
    revoke.add_argument("--lift", action="store_true", help="remove the revocation instead")
    revoke.add_argument("--list", action="store_true", help="print the revocation list")
    revoke.add_argument(
        "--force",
        action="store_true",
        help="record a revocation for an issuer the server does not trust (yet)",
    )
    revoke.set_defaults(run=_revoke)
