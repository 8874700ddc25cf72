"""Seeding two banks for the isolation oracle, through the same paths users take: notes by ingest
(a JSON-lines file, as `aml-mcp ingest` reads it), tasks and audit records by MCP calls over HTTP.

Bank B gets secrets everywhere (note text, account ids, subject names, a task input and result,
its baseline id, its client id in every audit record); bank A gets its own note secret (the
positive control for search) and an owner whose tasks carry a secret (the control for tasks).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.isolation.oracle import Caller, Seed, secret
from tests.support.mcp_http import create, wait_for

ALL_SCOPES = "aml:read aml:eval aml:draft"
ELSEWHERE = "https://elsewhere.example/mcp"

Mint = Callable[..., str]
"""`mint(subject=, tenant=, client_id=, scope=, audience=None, ttl=300) -> token` from the issuer
the server trusts (the development issuer)."""


@dataclass(frozen=True)
class Banks:
    a: str
    b: str


def note_rows(
    tenant_prefix: str, *, case_id: str, text: str, subject: str, account: str
) -> list[dict[str, Any]]:
    """One case of two notes; its subject has an account and no date of birth (a draft asks for it)."""
    return [
        {
            "note_id": f"{case_id}-N{n}",
            "case_id": case_id,
            "created_at": f"2024-03-0{n}T10:00:00Z",
            "text": text if n == 1 else f"Follow-up on {case_id}: cash deposits reviewed by {tenant_prefix}.",
            "subjects": [{"name": subject, "account_id": account, "role": "account holder"}],
            "typologies": ["structuring"],
            "amount": "9500.00",
            "currency": "USD",
        }
        for n in (1, 2)
    ]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


@dataclass
class Notes:
    """The notes files to ingest before the server starts, and the values seeding needs later."""

    files: dict[str, Path]
    b_case: str
    b_secrets: set[str]
    a_case: str
    a_note_secret: str
    a_note_query: str


def notes_for(banks: Banks, work: Path) -> Notes:
    b_case = f"HBT-ORC-{secrets.token_hex(4).upper()}"
    b_text_secret, b_name_secret, b_account = secret("btext"), secret("bname"), secret("bacct")
    b_text = f"Teller reports {b_text_secret}: structured cash deposits just below the threshold."
    a_case = f"MRD-ORC-{secrets.token_hex(4).upper()}"
    a_secret, a_query = secret("atext"), f"quokka{secrets.token_hex(3)}"
    a_text = f"Quarterly review {a_query} found {a_secret} in wire transfers to a shell company."
    files = {
        banks.b: write_jsonl(
            work / "bank-b.jsonl",
            note_rows("B", case_id=b_case, text=b_text, subject=f"Ana {b_name_secret}", account=b_account),
        ),
        banks.a: write_jsonl(
            work / "bank-a.jsonl",
            note_rows("A", case_id=a_case, text=a_text, subject="Bo Kestrel", account="ACC-A-77"),
        ),
    }
    return Notes(files, b_case, {b_text_secret, b_name_secret, b_account}, a_case, a_secret, a_query)


def seed_tasks(
    http: httpx.Client, mint: Mint, banks: Banks, notes: Notes, *, callers: bool = True
) -> tuple[Seed, list[Caller]]:
    """Bank B's analyst works (searches, drafts, evaluates); bank A's owner drafts. Then the callers."""
    b_subject, b_client = f"b-analyst-{secrets.token_hex(3)}", secret("bclient")
    b_token = mint(subject=b_subject, tenant=banks.b, client_id=b_client, scope=ALL_SCOPES)
    b_secret_case = secret("bcase")
    asking = create(http, "draft_sar_batch", {"case_ids": [notes.b_case]}, token=b_token)["taskId"]
    drafted = create(http, "draft_sar_batch", {"case_ids": [b_secret_case]}, token=b_token)["taskId"]
    evaluated = create(http, "run_full_eval", {"save_as_baseline": True}, token=b_token)["taskId"]
    wait_for(http, asking, "input_required", within=60, token=b_token)
    wait_for(http, drafted, "completed", within=60, token=b_token)
    evaluation = wait_for(http, evaluated, "completed", within=120, token=b_token)
    baseline = json.dumps(evaluation).split('"baseline_id": "', 1)
    b_secrets = {*notes.b_secrets, b_client, b_secret_case}
    if len(baseline) == 2:
        b_secrets.add(baseline[1].split('"', 1)[0])

    owner = {"subject": "a-owner", "tenant": banks.a, "client_id": "oracle-a-client"}
    owner_token = mint(**owner, scope="aml:admin")
    owner_secret = secret("ownercase")
    owned = create(http, "draft_sar_batch", {"case_ids": [owner_secret]}, token=owner_token)["taskId"]
    owner_asking = create(http, "draft_sar_batch", {"case_ids": [notes.a_case]}, token=owner_token)["taskId"]
    wait_for(http, owned, "completed", within=60, token=owner_token)
    wait_for(http, owner_asking, "input_required", within=60, token=owner_token)

    seed = Seed(
        bank_a=banks.a,
        bank_b=banks.b,
        b_task_ids=[asking, drafted, evaluated],
        b_case_ids=[notes.b_case],
        b_subjects=[b_subject],
        owner_task_ids=[owned, owner_asking],
        b_secrets=b_secrets,
        owner_secrets={owner_secret},
        a_note_secret=notes.a_note_secret,
        a_note_query=notes.a_note_query,
        b_task_states={asking: "input_required", drafted: "completed", evaluated: "completed"},
        owner_task_states={owned: "completed", owner_asking: "input_required"},
        task_owner_tokens={asking: b_token, drafted: b_token, evaluated: b_token, owned: owner_token}
        | {owner_asking: owner_token},
    )
    return seed, callers_of(mint, banks, owner, owner_token) if callers else []


def callers_of(mint: Mint, banks: Banks, owner: dict[str, str], owner_token: str) -> list[Caller]:
    """Every kind of caller of bank A: anonymous, refused tokens, each scope set, another client."""
    analyst = {"subject": "a-analyst", "tenant": banks.a, "client_id": "oracle-a-client"}
    callers = [
        Caller("anonymous", None),
        Caller("wrong audience", mint(**owner, scope="aml:admin", audience=ELSEWHERE)),
        Caller("expired", mint(**owner, scope="aml:admin", ttl=-3600)),
        Caller(
            "owner on another client",
            mint(
                subject=owner["subject"], tenant=banks.a, client_id="oracle-other-client", scope="aml:admin"
            ),
            subject=owner["subject"],
            tenant=banks.a,
            client_id="oracle-other-client",
            scopes=frozenset({"aml:admin"}),
        ),
    ]
    for name, scope in (
        ("no scope", ""),
        ("read", "aml:read"),
        ("eval", "aml:eval"),
        ("draft", "aml:draft"),
        ("read+eval+draft", ALL_SCOPES),
        ("admin", "aml:admin"),
    ):
        callers.append(Caller(name, mint(**analyst, scope=scope), **analyst, scopes=frozenset(scope.split())))
    callers.append(Caller("owner", owner_token, **owner, scopes=frozenset({"aml:admin"}), owner=True))
    return callers
