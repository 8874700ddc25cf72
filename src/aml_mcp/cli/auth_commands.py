"""Auth subcommands of `aml-mcp`: token, revoke, audit tail, devauth rotate-keys — and serve's safety rules.

`cli.py` calls `add_commands` to register them and `serve_refusal` / `serve_banner` around `serve`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from aml_mcp.audit import AUDIT_COMPONENT, AUDIT_MIGRATIONS, recent_events
from aml_mcp.auth.revocation import REVOCATION_COMPONENT, REVOCATION_MIGRATIONS, RevocationList
from aml_mcp.config import Settings, load_settings
from aml_mcp.devauth.keys import DevSigningKeys
from aml_mcp.devauth.wiring import (
    CLI_CLIENT_ID,
    SERVICE_CLIENT_ID,
    dev_issuer,
    service_client_secret,
    token_minter,
)
from aml_mcp.store.sqlite import SqliteDatabase


def serve_refusal(settings: Settings) -> str | None:
    """Why `serve` must not start with these settings (None: it may). Fails closed on exposure."""
    if settings.binds_loopback:
        return None
    if not settings.auth.enabled:
        return (
            f"refusing to serve on {settings.host}: authentication is off, so only loopback is allowed "
            "(turn AML_MCP_AUTH__ENABLED back on)"
        )
    if settings.auth.dev.enabled:
        return (
            f"refusing to serve on {settings.host}: the development authorization server (demo users, "
            "open registration) is for loopback only; set AML_MCP_AUTH__DEV__ENABLED=false and configure "
            "a trusted issuer in AML_MCP_AUTH__ISSUERS"
        )
    return None


def serve_banner(settings: Settings) -> str:
    """What `serve` prints about authentication: where the issuer is and how to get a token."""
    auth = settings.auth
    if not auth.enabled:
        return "authentication is OFF (loopback only): every request acts as the local principal"
    lines = [f"OAuth resource: {settings.resource_url} (metadata: /.well-known/oauth-protected-resource/mcp)"]
    trusted = [issuer.issuer for issuer in auth.issuers]
    if auth.dev.enabled:
        issuer = dev_issuer(settings.resource_url, auth.dev.path)
        trusted.insert(0, issuer)
        lines += [
            f"development authorization server: {issuer}",
            "  demo users (password = user name): alice, carol (meridian-bank); bob, dave (harbour-trust)",
            "  MCP clients: connect to the URL above; the 401 leads them to discovery, login and consent.",
            "  a token for scripts:",
            f"    aml-mcp token --data-dir {settings.data_dir} --port {settings.port} --subject alice"
            f' --tenant meridian-bank --client {CLI_CLIENT_ID} --scope "aml:read aml:draft"',
            "  client credentials:",
            f"    secret=$(aml-mcp devauth client-secret --data-dir {settings.data_dir})",
            f'    curl -s -u "{SERVICE_CLIENT_ID}:$secret" -d grant_type=client_credentials -d scope=aml:read'
            f" -d resource={settings.resource_url} {issuer}/token",
        ]
    lines.append(f"trusted issuers: {', '.join(trusted) or '(none: every request will be refused)'}")
    return "\n".join(lines)


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(
        getattr(args, "config", None),
        data_dir=getattr(args, "data_dir", None),
        host=getattr(args, "host", None),
        port=getattr(args, "port", None),
    )


def _token(args: argparse.Namespace) -> int:
    settings = _settings(args)
    minter = token_minter(settings.ensure_data_dir(), settings.auth, settings.resource_url)
    minted = minter.mint(
        subject=args.subject,
        tenant=args.tenant,
        client_id=args.client,
        scopes=args.scope.split(),
        audience=args.audience,
        ttl_seconds=args.ttl,
    )
    print(minted.token)
    if args.verbose:
        print(json.dumps(minted.claims, indent=2), file=sys.stderr)
    return 0


async def _with_revocations(settings: Settings, args: argparse.Namespace) -> int:
    database = SqliteDatabase(settings.ensure_data_dir() / "aml-mcp.db")
    database.open()
    try:
        await database.migrate(REVOCATION_COMPONENT, REVOCATION_MIGRATIONS)
        revocations = RevocationList(database)
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
    finally:
        database.close()


def _entry(entry: Any) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in ("kind", "issuer", "value", "revoked_at", "note")}


def _revoke(args: argparse.Namespace) -> int:
    if not (args.list or args.jti or args.subject):
        print("aml-mcp revoke: give --jti, --subject (with --issuer) or --list", file=sys.stderr)
        return 2
    return asyncio.run(_with_revocations(_settings(args), args))


async def _tail(settings: Settings, limit: int) -> list[dict[str, Any]]:
    database = SqliteDatabase(settings.ensure_data_dir() / "aml-mcp.db")
    database.open()
    try:
        await database.migrate(AUDIT_COMPONENT, AUDIT_MIGRATIONS)
        return recent_events(database, limit)
    finally:
        database.close()


def _audit_tail(args: argparse.Namespace) -> int:
    for event in asyncio.run(_tail(_settings(args), args.n)):
        print(json.dumps(event, separators=(",", ":"), ensure_ascii=False))
    return 0


def _rotate(args: argparse.Namespace) -> int:
    keys = DevSigningKeys(_settings(args).ensure_data_dir())
    print(f"new signing key {keys.rotate()}; JWKS now publishes {len(keys.jwks()['keys'])} keys")
    return 0


def _client_secret(args: argparse.Namespace) -> int:
    print(service_client_secret(_settings(args).ensure_data_dir()))
    return 0


def _common(parser: argparse.ArgumentParser, *, address: bool = False) -> None:
    parser.add_argument("--data-dir", type=Path, help="the server's data directory (default ./var)")
    parser.add_argument("--config", type=Path, help="a TOML settings file")
    if address:
        parser.add_argument(
            "--host", help="the server's host, for the issuer and audience (default 127.0.0.1)"
        )
        parser.add_argument("--port", type=int, help="the server's port, for the issuer and audience")


def add_commands(commands: Any) -> None:
    """Register the auth subcommands on `aml-mcp`'s subparsers."""
    token = commands.add_parser("token", help="print an access token signed by the development issuer's key")
    _common(token, address=True)
    token.add_argument("--subject", required=True)
    token.add_argument("--tenant", required=True)
    token.add_argument("--client", default=CLI_CLIENT_ID)
    token.add_argument("--scope", default="aml:read", help='space-separated, e.g. "aml:read aml:draft"')
    token.add_argument("--audience", help="the token's aud (default: this server's resource URL)")
    token.add_argument("--ttl", type=int, default=900, help="lifetime in seconds (default 900)")
    token.add_argument("-v", "--verbose", action="store_true", help="also print the claims on stderr")
    token.set_defaults(run=_token)

    revoke = commands.add_parser("revoke", help="deny a token (--jti) or every token of a subject")
    _common(revoke)
    revoke.add_argument("--jti", help="the token id to deny")
    revoke.add_argument("--subject", help="the subject to deny (needs --issuer)")
    revoke.add_argument("--issuer", help="the issuer of the subject (or of the jti; default any issuer)")
    revoke.add_argument("--note", help="why (kept with the revocation)")
    revoke.add_argument("--lift", action="store_true", help="remove the revocation instead")
    revoke.add_argument("--list", action="store_true", help="print the revocation list")
    revoke.set_defaults(run=_revoke)

    audit = commands.add_parser("audit", help="the audit trail")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    tail = audit_commands.add_parser("tail", help="print the newest audit events as JSON lines")
    _common(tail)
    tail.add_argument("-n", type=int, default=20, help="how many events (default 20)")
    tail.set_defaults(run=_audit_tail)

    devauth = commands.add_parser("devauth", help="the development authorization server")
    devauth_commands = devauth.add_subparsers(dest="devauth_command", required=True)
    rotate = devauth_commands.add_parser("rotate-keys", help="new signing key; the old ones stay published")
    _common(rotate)
    rotate.set_defaults(run=_rotate)
    secret = devauth_commands.add_parser(
        "client-secret", help=f"print the secret of the pre-registered {SERVICE_CLIENT_ID} client"
    )
    _common(secret)
    secret.set_defaults(run=_client_secret)
